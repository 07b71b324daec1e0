#!/usr/bin/python3
"""make demo: Fashion-MNIST (70,000 images of 28x28) clustered inside PostgreSQL.

Loads the images into a table of real[784], runs kmeans_fit with k = 10, and
prints the cluster sizes, purity and adjusted Rand index against the true
classes, the time and the engine; draws the centroids into a PNG with each
cluster's id, size and majority class (with its share) written under it.
"""
import gzip
import io
import os
import sys
import time

import numpy as np
import psycopg2
from PIL import Image, ImageDraw, ImageFont
from sklearn.metrics import adjusted_rand_score

DATA = "/usr/share/datasets/fashion-mnist"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
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


def labelled_sheet(centroids, captions, scale=5, pad=8, font_size=13):
    """The centroid sheet with captions (lists of lines) under each tile."""
    tiles = Image.fromarray(centroid_sheet(centroids, scale, pad), mode="L")
    font = ImageFont.truetype(FONT, font_size)
    line_height = font_size + 4
    lines = max(len(c) for c in captions)
    sheet = Image.new("L", (tiles.width, tiles.height + lines * line_height + pad), 255)
    sheet.paste(tiles, (0, 0))
    draw = ImageDraw.Draw(sheet)
    tile = 28 * scale
    for j, caption in enumerate(captions):
        centre = pad + j * (tile + pad) + tile // 2
        for i, text in enumerate(caption):
            width = draw.textlength(text, font=font)
            draw.text((centre - width / 2, tiles.height + i * line_height), text, fill=0, font=font)
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
    captions = []
    for j in range(10):
        members = truth[labels == j]
        counts = np.bincount(members, minlength=10)
        top = int(np.argmax(counts))
        majority_total += counts[top]
        share = counts[top] / max(1, len(members))
        print(f"{j:7d}  {sizes[j]:5d}   {CLASSES[top]:<15}  {share:6.1%}")
        captions.append([f"cluster {j}", f"{sizes[j]} images", f"{CLASSES[top]} {share:.0%}"])
    purity = majority_total / len(truth)
    ari = adjusted_rand_score(truth, labels)
    print()
    print(f"purity {purity:.3f}, adjusted Rand index {ari:.3f} against the 10 true classes")
    labelled_sheet(centroids, captions).save(out)
    print(f"centroids drawn in {out}, each with its id, size and majority class")
    conn.close()


if __name__ == "__main__":
    main()
