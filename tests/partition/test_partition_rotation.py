import numpy as np
import pytest

from fedclust.partition import HeldOut, RotatedData, partition_stats, rotation


def check_rotations(rd, images, images_test=None):
    """Every train/test image equals np.rot90 of its source by its client's group angle."""
    images_test = images if images_test is None else images_test
    for g, angle in enumerate(rd.angles):
        k = angle // 90
        tr = rd.group[rd.client_train] == g
        te = rd.group[rd.client_test] == g
        assert np.array_equal(rd.images_train[tr], np.rot90(images[rd.source_train[tr]], k, axes=(-2, -1)))
        assert np.array_equal(rd.images_test[te], np.rot90(images_test[rd.source_test[te]], k, axes=(-2, -1)))
    assert np.array_equal(rd.X_train, rd.images_train.reshape(len(rd.y_train), -1))
    assert rd.X_train.dtype == np.float32


def test_balanced_four_groups_rotated_by_g_times_90(digits):
    _, y, img = digits
    rd = rotation(img, y, n_groups=4, n_clients=40, samples_per_client=30, test_per_client=8, seed=0)
    assert isinstance(rd, RotatedData)
    assert rd.angles == (0, 90, 180, 270)
    assert np.bincount(rd.group).tolist() == [10, 10, 10, 10]
    assert np.array_equal(rd.group, np.repeat(np.arange(4), 10))  # group-major client ids
    assert np.all(np.bincount(rd.client_train) == 30) and np.all(np.bincount(rd.client_test) == 8)
    check_rotations(rd, img)
    assert np.array_equal(rd.y_train, y[rd.source_train]) and np.array_equal(rd.y_test, y[rd.source_test])
    # a non-trivial rotation really changed the pixels
    g1 = rd.group[rd.client_train] == 1
    assert not np.array_equal(rd.images_train[g1], img[rd.source_train[g1]])


def test_imbalanced_2_1_1_uses_0_90_180(digits):
    _, y, img = digits
    rd = rotation(img, y, n_groups=3, ratios=(2, 1, 1), n_clients=40, samples_per_client=20, test_per_client=5, seed=1)
    assert rd.angles == (0, 90, 180)
    assert np.bincount(rd.group).tolist() == [20, 10, 10]
    check_rotations(rd, img)
    rd = rotation(img, y, n_groups=3, ratios=(2, 1, 1), n_clients=1000, samples_per_client=1, test_per_client=0, seed=1)
    assert np.bincount(rd.group).tolist() == [500, 250, 250]


def test_two_groups_default_to_0_and_180_and_angles_override(digits):
    _, y, img = digits
    assert rotation(img, y, n_groups=2, n_clients=4, samples_per_client=5, seed=0).angles == (0, 180)
    rd = rotation(img, y, n_groups=2, n_clients=4, samples_per_client=5, angles=(270, 90), seed=0)
    assert rd.angles == (270, 90)
    check_rotations(rd, img)


def test_reuse_independent_permutation_per_group_and_test_disjoint(digits):
    _, y, img = digits
    n = y.size
    rd = rotation(img, y, n_groups=4, n_clients=40, seed=2)  # defaults fill the pool per group
    spc, tpc = rd.meta["samples_per_client"], rd.meta["test_per_client"]
    assert 10 * (spc + tpc) <= n and 10 * (spc + tpc + 1) > n
    assert tpc > 0
    train_sources = set(rd.source_train.tolist())
    for g in range(4):
        src = rd.source_train[rd.group[rd.client_train] == g]
        assert np.unique(src).size == src.size  # no image twice within a group
    # the same pool image appears in several groups (reuse), under different permutations
    assert len(train_sources) < rd.source_train.size
    g0 = rd.source_train[rd.group[rd.client_train] == 0]
    g1 = rd.source_train[rd.group[rd.client_train] == 1]
    assert not np.array_equal(g0, g1)
    # test images were carved out of the pool: never in any client's training set
    assert train_sources.isdisjoint(rd.source_test.tolist())
    # and a client's own training and test sets are disjoint
    for i in range(rd.n_clients):
        assert set(rd.source_train[rd.client_train == i]).isdisjoint(rd.source_test[rd.client_test == i])


def test_disjoint_construction_uses_every_image_at_most_once(digits):
    _, y, img = digits
    rd = rotation(img, y, n_groups=4, n_clients=40, seed=3, reuse=False)
    both = np.concatenate([rd.source_train, rd.source_test])
    assert np.unique(both).size == both.size
    assert both.size <= y.size and both.size > y.size - 40
    check_rotations(rd, img)


def test_given_test_split_and_channels_axis(digits):
    _, y, img = digits
    colour = np.stack([img, img + 1, img * 2], axis=1)  # (n, 3, 8, 8)
    tr, te = colour[:1500], colour[1500:]
    test = HeldOut(images=te, y=y[1500:], shuffle=False)
    rd = rotation(tr, y[:1500], n_groups=4, n_clients=20, test=test, seed=4)
    assert rd.images_train.shape[1:] == (3, 8, 8) and rd.X_train.shape[1] == 192
    assert rd.meta["samples_per_client"] == 1500 // 5 and rd.meta["test_per_client"] == 297 // 5
    check_rotations(rd, tr, te)
    # shuffle_test=False: each group's test clients take the test pool in order (IFCA code)
    first = rd.source_test[rd.group[rd.client_test] == 2]
    assert np.array_equal(first, np.arange(first.size))


def test_partition_view_for_reporting(digits):
    _, y, img = digits
    rd = rotation(img, y, n_groups=3, ratios=(2, 1, 1), n_clients=8, samples_per_client=10, test_per_client=3, seed=0)
    p = rd.partition()
    assert p.client.size == rd.y.size == rd.X.shape[0] == 8 * 13
    assert np.array_equal(p.group, rd.group)
    assert np.array_equal(p.client_sizes(), np.full(8, 10))
    assert np.array_equal(np.bincount(p.test_client[p.test_client >= 0]), np.full(8, 3))
    assert np.array_equal(rd.y[p.client >= 0], rd.y_train)
    s = partition_stats(p, rd.y)
    assert s["n_samples"] == 80 and s["n_test"] == 24 and s["group_sizes"] == [4, 2, 2] and s["n_unused"] == 0
    assert np.array_equal(rd.train_partition().client, rd.client_train)


def test_rotation_seed_reproducible(digits):
    _, y, img = digits
    kw = dict(n_groups=4, n_clients=20, samples_per_client=10, test_per_client=2)
    a, b, c = rotation(img, y, seed=5, **kw), rotation(img, y, seed=5, **kw), rotation(img, y, seed=6, **kw)
    assert np.array_equal(a.source_train, b.source_train) and np.array_equal(a.images_test, b.images_test)
    assert not np.array_equal(a.source_train, c.source_train)


def test_rotation_bad_parameters(digits):
    _, y, img = digits
    kw = dict(n_clients=8, samples_per_client=10, seed=0)
    with pytest.raises(ValueError, match="ratios"):
        rotation(img, y, n_groups=3, ratios=(2, 0, 1), **kw)
    with pytest.raises(ValueError, match="ratios"):
        rotation(img, y, n_groups=3, ratios=(2, 1), **kw)
    with pytest.raises(ValueError, match="angles"):
        rotation(img, y, n_groups=2, angles=(0, 45), **kw)
    with pytest.raises(ValueError, match="n_groups"):
        rotation(img, y, n_groups=5, n_clients=10, samples_per_client=10, seed=0)
    with pytest.raises(ValueError, match="square"):
        rotation(np.zeros((20, 4, 6)), np.zeros(20, int), n_groups=2, angles=(0, 90), n_clients=2, seed=0)
    with pytest.raises(ValueError, match="samples_per_client"):
        rotation(img, y, n_groups=4, n_clients=8, samples_per_client=900, seed=0)
    with pytest.raises(ValueError, match="test_per_client"):
        rotation(
            img[:100],
            y[:100],
            n_groups=1,
            n_clients=2,
            samples_per_client=10,
            test=HeldOut(images=img[100:110], y=y[100:110]),
            test_per_client=6,
            seed=0,
        )
    with pytest.raises(ValueError, match="n_clients"):
        rotation(img, y, n_groups=3, ratios=(10, 1, 1), n_clients=4, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        rotation(img, y, n_groups=4, seed=0)
    with pytest.raises(ValueError, match="images"):
        rotation(img[:, 0], y, n_groups=1, n_clients=2, seed=0)


def test_two_groups_180_on_non_square_images_is_allowed():
    imgs = np.arange(20 * 4 * 6, dtype=np.float32).reshape(20, 4, 6)
    rd = rotation(imgs, np.arange(20) % 2, n_groups=2, n_clients=2, samples_per_client=5, test_per_client=2, seed=0)
    assert rd.images_train.shape[1:] == (4, 6)
    check_rotations(rd, imgs)
