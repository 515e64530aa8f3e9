"""FedDP-KMeans's defaults on data nobody tuned them for: six data sets, one set of defaults.

    .venv/bin/python benchmarks/bench_own_data.py [--seeds 3] [--quick] [--eps 1]

Reads the real files of ``../shared/data`` (MNIST's 10,000 test images; skipped with a note when
absent). For every data set: ``fed_dp_kmeans`` through the method registry with its defaults (the
config class of ``fed_dp_kmeans.train``: clip, weight threshold and projection from the public rules
of :mod:`fedclust.clustering.defaults`), 10 iid clients (100 for the Gaussian mixture), delta = 1e-5,
RDP accounting, secure aggregation, a 5 % held-out server sample, at each epsilon and without DP, on
seeds 0, 1, 2; against non-private centralized k-means (scikit-learn, 10 restarts, same seed) on the
same scaled data. Prints ACC and NMI (mean ± std over seeds), the gap to k-means, the chance line
(ACC of the true class sizes shuffled, 95th percentile) and the majority-class share.

The data sets, and why: digits (64 pixel features, [0, 1], the default data), MNIST test set (784
pixel features, 10,000 samples), iris, wine and breast_cancer standardized (4, 13 and 30 features,
150 to 569 samples: a server sample of 8 to 28 points), and an isotropic Gaussian mixture of 10
components in 100 dimensions over 100 clients, unscaled (no declared bound: the clip must come from the
server's sample), in the spirit of the FedDP-KMeans authors' synthetic data.

The last table runs digits with a public server file from another distribution: MNIST reduced to
8 x 8 the way digits were made (each digit's bounding box scaled into a 32 x 32 bitmap, 4 x 4 blocks
of on-pixels, 0..16), 1,000 images, scaled to [0, 1].
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage
from sklearn.cluster import KMeans

from fedclust import bench
from fedclust.clustering import fed_dp_kmeans
from fedclust.data.base import Dataset
from fedclust.data.registry import prepare_dataset
from fedclust.metrics import clustering_scores, data_chance_line
from fedclust.partition import make_partition
from fedclust.registry import REGISTRY

DELTA = 1e-5


def suite(quick: bool) -> list[tuple[str, Dataset, int]]:
    """(label, scaled data set, clients) of every data set of the suite."""
    out = [("digits (minmax)", prepare_dataset("digits"), 10)]
    if bench.have_mnist() and not quick:
        X, y, _ = bench.mnist_test()
        out.append(
            ("MNIST 10k (pixels / 255)", Dataset(X=X, y=y, name="mnist", meta={"preprocess": {"scale": "minmax"}}), 10)
        )
    for name in ("iris", "wine", "breast_cancer"):
        out.append((f"{name} (standardized)", prepare_dataset(name, scale="standardize"), 10))
    gm = prepare_dataset(
        "gaussian_mixture", scale="none", options={"n_samples": 20000, "n_features": 100, "k": 10, "separation": 4.0}
    )
    out.append(("Gaussian mixture (20k x 100, k = 10, unscaled)", gm, 100))
    return out


def fed_dp(ds: Dataset, n_clients: int, seed: int, eps, **settings) -> dict:
    """One fed_dp_kmeans run through the registry (what ``kedro run --pipelines=fed_dp_kmeans`` runs)."""
    spec = REGISTRY["fed_dp_kmeans"]
    cfg = spec.config_from(settings)
    part = make_partition("iid", y=ds.y, n_clients=n_clients, seed=seed)
    noise = spec.calibrate({"epsilon": eps, "delta": DELTA, "accountant": "rdp"}, cfg, ds, part)
    res = spec.run(ds, part, noise, cfg, seed)
    return {**clustering_scores(ds.y, res.labels), "info": res.info}


def kmeans_scores(ds: Dataset, seed: int) -> dict:
    k = ds.n_classes
    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(ds.X.astype(np.float64))
    return clustering_scores(ds.y, labels)


def mnist_8x8(n: int = 1000) -> np.ndarray:
    """The first ``n`` MNIST test images reduced as the UCI optdigits images (scikit-learn's digits)
    were made: the digit's bounding box scaled so that its longer side spans 32 pixels (aspect ratio
    kept, centred in a 32 x 32 frame), binarized at half intensity, on-pixels counted in 4 x 4 blocks
    (0..16), divided by 16 like digits' min-max scaling."""
    _, _, images = bench.mnist_test(max_images=n)
    frames = np.zeros((images.shape[0], 32, 32))
    for frame, image in zip(frames, images):
        on = image >= 0.5
        rows, cols = np.flatnonzero(on.any(axis=1)), np.flatnonzero(on.any(axis=0))
        if rows.size == 0:
            continue
        box = image[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        scale = 32.0 / max(box.shape)
        h, w = (min(32, max(1, round(side * scale))) for side in box.shape)
        big = ndimage.zoom(box, (h / box.shape[0], w / box.shape[1]), order=1)[:h, :w]
        top, left = (32 - big.shape[0]) // 2, (32 - big.shape[1]) // 2
        frame[top : top + big.shape[0], left : left + big.shape[1]] = big >= 0.5
    blocks = frames.reshape(-1, 8, 4, 8, 4).sum(axis=(2, 4))
    return (blocks / 16.0).reshape(-1, 64)


def main():
    ap = bench.parser(__doc__, quick="no MNIST, 2 seeds", seeds=3)
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0], help="budgets (default: 1)")
    args = ap.parse_args()
    seeds = list(range(2 if args.quick else args.seeds))
    epsilons = [*args.eps, None]
    with bench.session(args):
        rows = []
        for label, ds, n_clients in suite(args.quick):
            km = [kmeans_scores(ds, s) for s in seeds]
            km_acc = [r["ACC"] for r in km]
            cl = data_chance_line(ds.y)
            majority = float(np.bincount(ds.y).max() / ds.n_samples)
            for eps in epsilons:
                runs = [fed_dp(ds, n_clients, s, eps) for s in seeds]
                acc = [r["ACC"] for r in runs]
                info = runs[0]["info"]
                rows.append(
                    [
                        label,
                        f"{eps:g}" if eps else "no DP",
                        bench.mean_std(acc),
                        bench.mean_std([r["NMI"] for r in runs]),
                        bench.mean_std(km_acc),
                        f"{np.mean(acc) - np.mean(km_acc):+.3f}",
                        f"{cl['ACC_chance_hi']:.3f} / {majority:.3f}",
                        f"{info['clip']:.3g}",
                        f"{info['server_points_kept']}/{info['n_server_points']}",
                    ]
                )
                print(" | ".join(rows[-1]), flush=True)
        bench.table(
            ["data", "ε", "fed_dp_kmeans ACC", "NMI", "k-means ACC", "gap", "chance / majority", "clip", "kept"],
            rows,
            title=f"fed_dp_kmeans defaults (secure aggregation, 5 % holdout) vs centralized k-means, seeds {seeds}",
        )
        if bench.have_mnist():
            ds = prepare_dataset("digits")
            public = mnist_8x8()
            rows = []
            for server, settings in (
                ("5 % holdout of digits", {}),
                ("MNIST 8 x 8, 1,000 images (public file)", {"server_data": "array"}),
            ):
                for eps in epsilons:
                    accs = []
                    for s in seeds:
                        if settings:
                            accs.append(file_server_run(ds, public, s, eps))
                        else:
                            accs.append(fed_dp(ds, 10, s, eps)["ACC"])
                    rows.append([server, f"{eps:g}" if eps else "no DP", bench.mean_std(accs)])
            chance = data_chance_line(ds.y)["ACC_chance_hi"]
            bench.table(
                ["server data", "ε", "ACC"],
                rows,
                title=f"digits, 10 iid clients, secure aggregation: server data from elsewhere (chance line {chance:.3f})",
            )


def file_server_run(ds: Dataset, public: np.ndarray, seed: int, eps) -> float:
    """fed_dp_kmeans on digits with ``public`` as the server's points (the library takes the array the
    registry reads from a server-data file)."""
    spec = REGISTRY["fed_dp_kmeans"]
    cfg = spec.config_from({})
    part = make_partition("iid", y=ds.y, n_clients=10, seed=seed)
    z = (
        fed_dp_kmeans.noise_multipliers(eps, DELTA, projection=cfg.projection, steps=cfg.steps, accountant="rdp")
        if eps
        else None
    )
    res = fed_dp_kmeans.run(ds.X, part.client, ds.n_classes, server_data=public, noise=z, seed=seed, y=ds.y)
    return clustering_scores(ds.y, res.labels)["ACC"]


if __name__ == "__main__":
    main()
