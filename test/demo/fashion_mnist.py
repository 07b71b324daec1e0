#!/usr/bin/python3
"""make demo: Fashion-MNIST (70,000 images of 28x28) clustered inside PostgreSQL.

Loads the images into a table of real[784], runs kmeans_fit with k = 10, and
prints the cluster sizes, purity and adjusted Rand index against the true
classes, the time and the engine; writes the centroids as a PNG.  Then runs
kmeans_sweep for k = 2 ... 20 and draws the elbow and the silhouette against
k, and draws the ten medoids of a kmedoids_fit (real images) under the ten
centroids.
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
    here = os.path.dirname(os.path.abspath(out))
    sweep_picture(cur, os.path.join(here, "fashion_mnist_sweep.png"))
    medoids_picture(cur, centroids, os.path.join(here, "fashion_mnist_medoids.png"))
    conn.close()


# --- choosing k (kmeans_sweep) and medoids (kmedoids_fit) ---------------------

# A 5 x 7 bitmap font for the few characters the pictures need.
GLYPHS = {
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110",
    "9": "01110 10001 10001 01111 00001 00010 01100",
    ".": "00000 00000 00000 00000 00000 01100 01100",
    "-": "00000 00000 00000 11111 00000 00000 00000",
    " ": "00000 00000 00000 00000 00000 00000 00000",
    "a": "00000 00000 01110 00001 01111 10001 01111",
    "c": "00000 00000 01110 10000 10000 10001 01110",
    "d": "00001 00001 01101 10011 10001 10001 01111",
    "e": "00000 00000 01110 10001 11111 10000 01110",
    "h": "10000 10000 10110 11001 10001 10001 10001",
    "i": "00100 00000 01100 00100 00100 00100 01110",
    "k": "10000 10000 10010 10100 11000 10100 10010",
    "l": "01100 00100 00100 00100 00100 00100 01110",
    "m": "00000 00000 11010 10101 10101 10001 10001",
    "n": "00000 00000 10110 11001 10001 10001 10001",
    "o": "00000 00000 01110 10001 10001 10001 01110",
    "r": "00000 00000 10110 11001 10000 10000 10000",
    "s": "00000 00000 01110 10000 01110 00001 11110",
    "t": "01000 01000 11100 01000 01000 01001 00110",
    "u": "00000 00000 10001 10001 10001 10011 01101",
}


def draw_text(img, x, y, text, scale=2, ink=0):
    """Write text with its top-left corner at (x, y)."""
    for ch in text:
        rows = GLYPHS.get(ch, GLYPHS[" "]).split()
        for r, bits in enumerate(rows):
            for c, bit in enumerate(bits):
                if bit == "1":
                    img[y + r * scale:y + (r + 1) * scale, x + c * scale:x + (c + 1) * scale] = ink
        x += 6 * scale


def draw_line(img, x0, y0, x1, y1, ink, width=2):
    """A straight line, as a run of small squares."""
    n = max(abs(x1 - x0), abs(y1 - y0), 1)
    for t in range(n + 1):
        x = round(x0 + (x1 - x0) * t / n)
        y = round(y0 + (y1 - y0) * t / n)
        img[y:y + width, x:x + width] = ink


def short(v):
    """A number in a few characters: 0.251, 12.5, 2.1e10."""
    text = f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2g}"
    return text.replace("e+", "e").replace("e0", "e")


def plot_panel(img, x0, y0, w, h, ks, values, title):
    """values against k in the box (x0, y0, w, h): axes, ticks, line, dots."""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    px = [x0 + round((k - ks[0]) * (w - 1) / max(1, ks[-1] - ks[0])) for k in ks]
    py = [y0 + h - 1 - round((v - lo) * (h - 1) / span) for v in values]
    draw_line(img, x0 - 4, y0 + h + 2, x0 + w, y0 + h + 2, 0)          # the k axis
    draw_line(img, x0 - 4, y0, x0 - 4, y0 + h + 2, 0)                  # the value axis
    for k, x in zip(ks, px):
        draw_line(img, x, y0 + h + 2, x, y0 + h + 8, 0, width=1)
        if k % 2 == 0:
            draw_text(img, x - 6 * len(str(k)) + 1, y0 + h + 12, str(k), scale=2)
    draw_text(img, x0 + w // 2 - 6, y0 + h + 32, "k", scale=2)
    draw_text(img, x0 - 4, y0 - 40, title, scale=3)
    draw_text(img, x0 + 6, y0 - 14, short(hi), scale=2, ink=96)
    draw_text(img, x0 + 6, y0 + h - 16, short(lo), scale=2, ink=96)
    for i in range(1, len(ks)):
        draw_line(img, px[i - 1], py[i - 1], px[i], py[i], 110)
    for x, y in zip(px, py):
        img[y - 3:y + 4, x - 3:x + 4] = 0


def sweep_picture(cur, out):
    """kmeans_sweep for k = 2 ... 20, one read of the table: the elbow
    (inertia) and the silhouette against k, side by side, in one PNG."""
    t0 = time.time()
    cur.execute("""SELECT k, inertia, silhouette FROM kmeans_sweep('fashion', 'image',
                       ARRAY(SELECT generate_series(2, 20)), seed => 1, sample => 5000) ORDER BY k""")
    rows = cur.fetchall()
    print(f"\nSELECT * FROM kmeans_sweep('fashion', 'image', ks => 2 ... 20, sample => 5000): "
          f"{time.time() - t0:.1f} s for {len(rows)} fits from one read of the table")
    print("   k   inertia     silhouette")
    for k, inertia, sil in rows:
        print(f"  {k:2d}   {inertia:.4e}  {sil:.4f}")
    best = max(rows, key=lambda r: r[2])
    print(f"the highest silhouette is at k = {best[0]}")
    ks = [r[0] for r in rows]
    img = np.full((400, 1000), 255, dtype=np.uint8)
    plot_panel(img, 70, 70, 380, 250, ks, [r[1] for r in rows], "inertia")
    plot_panel(img, 580, 70, 380, 250, ks, [r[2] for r in rows], "silhouette")
    write_png(out, img)
    print(f"the elbow and the silhouette drawn in {out}")


def medoids_picture(cur, centroids, out):
    """kmedoids_fit on 10,000 of the images: ten real garments, drawn under the
    ten centroids of the k-means model (each beside its nearest medoid)."""
    cur.execute("DROP TABLE IF EXISTS fashion_sample")
    cur.execute("CREATE TABLE fashion_sample AS SELECT * FROM fashion WHERE id % 7 = 0")
    t0 = time.time()
    cur.execute("""SELECT (m).medoids, (m).medoid_ids, (m).cost, (m).iterations
                   FROM (SELECT kmedoids_fit('fashion_sample', 'image', 10, method => 'fasterpam',
                                             seed => 1, id_column => 'id') AS m) s""")
    medoids, ids, cost, passes = cur.fetchone()
    print(f"\nSELECT kmedoids_fit('fashion_sample', 'image', 10, method => 'fasterpam') on "
          f"10,000 images: {time.time() - t0:.1f} s, {passes} passes, cost {cost:.4g}")
    cur.execute("SELECT id, class FROM fashion WHERE id = ANY(%s)", (ids,))
    classes = dict(cur.fetchall())
    C = np.asarray(centroids, dtype=np.float64)
    M = np.asarray(medoids, dtype=np.float64)
    order, free = [], list(range(len(M)))
    for c in C:
        j = min(free, key=lambda m: float(((M[m] - c) ** 2).sum()))
        order.append(j)
        free.remove(j)
    print("the medoids are the images " + ", ".join(f"{ids[j]} ({CLASSES[classes[ids[j]]]})" for j in order))
    top = centroid_sheet(centroids)
    bottom = centroid_sheet([M[j] for j in order])
    label = np.full((top.shape[0] * 2, 150), 255, dtype=np.uint8)
    draw_text(label, 8, top.shape[0] // 2 - 7, "centroids", scale=2)
    draw_text(label, 8, top.shape[0] + top.shape[0] // 2 - 7, "medoids", scale=2)
    write_png(out, np.hstack([label, np.vstack([top, bottom])]))
    print(f"centroids (top) and medoids (bottom) drawn in {out}")


if __name__ == "__main__":
    main()
