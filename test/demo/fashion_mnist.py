#!/usr/bin/python3
"""make demo: Fashion-MNIST (70,000 images of 28x28) clustered inside PostgreSQL.

Loads the images into a table of real[784], runs kmeans_fit with k = 10, and
prints the cluster sizes, purity and adjusted Rand index against the true
classes, the time and the engine; writes the centroids as a PNG.
"""
import gzip
import io
import os
import struct
import sys
import time
import zlib

import numpy as np
import psycopg2
from sklearn.metrics import adjusted_rand_score

DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(name, offset):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load_fashion():
    images = np.concatenate([read_idx("train-images-idx3-ubyte.gz", 16),
                             read_idx("t10k-images-idx3-ubyte.gz", 16)]).reshape(-1, 784)
    labels = np.concatenate([read_idx("train-labels-idx1-ubyte.gz", 8),
                             read_idx("t10k-labels-idx1-ubyte.gz", 8)])
    return images, labels


def write_png(path, pixels):
    """Grayscale 8-bit PNG, no dependency beyond zlib."""
    height, width = pixels.shape
    raw = b"".join(b"\x00" + pixels[r].tobytes() for r in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


def centroid_sheet(centroids, scale=4, pad=2):
    """The k centroids as 28x28 tiles in one row, each scaled up."""
    k = len(centroids)
    tile = 28 * scale
    sheet = np.full((tile + 2 * pad, k * (tile + pad) + pad), 255, dtype=np.uint8)
    for j, c in enumerate(centroids):
        img = np.clip(np.asarray(c, dtype=np.float64).reshape(28, 28), 0, 255)
        img = (255 - img).astype(np.uint8)  # dark ink on white
        big = np.kron(img, np.ones((scale, scale), dtype=np.uint8))
        x = pad + j * (tile + pad)
        sheet[pad:pad + tile, x:x + tile] = big
    return sheet


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fashion_mnist_centroids.png"
    images, truth = load_fashion()
    conn = psycopg2.connect()
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION IF NOT EXISTS kmeans_gpu")
    cur.execute("DROP TABLE IF EXISTS fashion")
    cur.execute("CREATE TABLE fashion (id int PRIMARY KEY, class int, image real[])")

    t0 = time.time()
    buf = io.StringIO()
    for i, (img, cls) in enumerate(zip(images, truth)):
        buf.write(f"{i}\t{cls}\t{{{','.join(map(str, img.tolist()))}}}\n")
    buf.seek(0)
    cur.copy_expert("COPY fashion FROM STDIN", buf)
    cur.execute("ANALYZE fashion")
    print(f"loaded {len(images)} images of 28x28 into table fashion in {time.time() - t0:.1f} s")

    t0 = time.time()
    cur.execute("""CREATE TABLE fashion_model AS
                   SELECT kmeans_fit('fashion', 'image', 10, seed => 1) AS m""")
    fit_seconds = time.time() - t0
    cur.execute("""SELECT (m).engine, (m).iterations, (m).converged, (m).inertia, (m).sizes
                   FROM fashion_model""")
    engine, iterations, converged, inertia, sizes = cur.fetchone()
    cur.execute("""SELECT l.id, l.cluster_id FROM fashion_model,
                   kmeans_labels(m, 'fashion', 'image', 'id') l ORDER BY l.id""")
    labels = np.array([r[1] for r in cur.fetchall()])
    cur.execute("SELECT centroid FROM fashion_model, kmeans_centroids(m) ORDER BY cluster_id")
    centroids = [r[0] for r in cur.fetchall()]

    print(f"SELECT kmeans_fit('fashion', 'image', 10, seed => 1): {fit_seconds:.2f} s "
          f"on the {engine} engine, {iterations} iterations, converged: {converged}, inertia {inertia:.4g}")
    print()
    print("cluster  size   majority class   share")
    majority_total = 0
    for j in range(10):
        members = truth[labels == j]
        counts = np.bincount(members, minlength=10)
        top = int(np.argmax(counts))
        majority_total += counts[top]
        share = counts[top] / max(1, len(members))
        print(f"{j:7d}  {sizes[j]:5d}   {CLASSES[top]:<15}  {share:6.1%}")
    purity = majority_total / len(truth)
    ari = adjusted_rand_score(truth, labels)
    print()
    print(f"purity {purity:.3f}, adjusted Rand index {ari:.3f} against the 10 true classes")
    write_png(out, centroid_sheet(centroids))
    print(f"centroids drawn in {out}")
    conn.close()


if __name__ == "__main__":
    main()
