#!/usr/bin/python3
"""make demo: Fashion-MNIST (70,000 images of 28x28) clustered inside PostgreSQL.

Loads the images into a table of real[784], runs kmeans_fit with k = 10, and
prints the cluster sizes, purity and adjusted Rand index against the true
classes, the time and the engine; draws the centroids into a PNG with each
cluster's id, size and majority class (with its share) written under it.
Then runs kmeans_sweep for k = 2 ... 20 and draws the elbow and the
silhouette against k, and draws the ten medoids of a kmedoids_fit (real
images) under the ten centroids.
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
    here = os.path.dirname(os.path.abspath(out))
    sweep_picture(cur, os.path.join(here, "fashion_mnist_sweep.png"))
    medoids_picture(cur, centroids, os.path.join(here, "fashion_mnist_medoids.png"))
    conn.close()


# --- choosing k (kmeans_sweep) and medoids (kmedoids_fit) ---------------------

def short(v):
    """A number in a few characters: 0.251, 12.5, 2.1e10."""
    text = f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2g}"
    return text.replace("e+", "e").replace("e0", "e")


def plot_panel(draw, box, ks, values, title, font, big):
    """values against k in box (x0, y0, w, h): axes, ticks, the line, dots."""
    x0, y0, w, h = box
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    px = [x0 + (k - ks[0]) * (w - 1) / max(1, ks[-1] - ks[0]) for k in ks]
    py = [y0 + h - 1 - (v - lo) * (h - 1) / span for v in values]
    draw.line([(x0 - 4, y0 + h + 2), (x0 + w, y0 + h + 2)], fill=0, width=2)     # the k axis
    draw.line([(x0 - 4, y0), (x0 - 4, y0 + h + 2)], fill=0, width=2)             # the value axis
    for k, x in zip(ks, px):
        draw.line([(x, y0 + h + 2), (x, y0 + h + 8)], fill=0, width=1)
        if k % 2 == 0:
            draw.text((x, y0 + h + 10), str(k), fill=0, font=font, anchor="mt")
    draw.text((x0 + w / 2, y0 + h + 32), "k", fill=0, font=font, anchor="mt")
    draw.text((x0 - 4, y0 - 44), title, fill=0, font=big)
    draw.text((x0 + 6, y0 - 16), short(hi), fill=96, font=font)
    draw.text((x0 + 6, y0 + h - 20), short(lo), fill=96, font=font)
    draw.line(list(zip(px, py)), fill=110, width=2)
    for x, y in zip(px, py):
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=0)


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
    img = Image.new("L", (1000, 400), 255)
    draw = ImageDraw.Draw(img)
    font, big = ImageFont.truetype(FONT, 14), ImageFont.truetype(FONT, 22)
    plot_panel(draw, (70, 70, 380, 250), ks, [r[1] for r in rows], "inertia", font, big)
    plot_panel(draw, (580, 70, 380, 250), ks, [r[2] for r in rows], "silhouette", font, big)
    img.save(out)
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
    top = Image.fromarray(centroid_sheet(centroids), mode="L")
    bottom = Image.fromarray(centroid_sheet([M[j] for j in order]), mode="L")
    img = Image.new("L", (150 + top.width, 2 * top.height), 255)
    img.paste(top, (150, 0))
    img.paste(bottom, (150, top.height))
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(FONT, 18)
    draw.text((8, top.height // 2), "centroids", fill=0, font=font, anchor="lm")
    draw.text((8, top.height + top.height // 2), "medoids", fill=0, font=font, anchor="lm")
    img.save(out)
    print(f"centroids (top) and medoids (bottom) drawn in {out}")


if __name__ == "__main__":
    main()
