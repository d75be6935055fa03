"""Coupling datasets: tokenflow.tasks.save / load, train(config, pairs=..., test_pairs=...), and the
checks of hostile pairs (in memory and in files)."""
import os

import numpy as np
import pytest

import tokenflow
import tokenflow.tasks
from tokenflow.tasks import TaskPair

TINY = {"model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "sinkhorn_iters": 8},
        "train": {"steps": 6, "batch": 4, "lr": 1e-2}}


def partial_pair(rng, n, d):
    """x, and y = a rotated copy of x without some of its tokens, shuffled: the target links each kept
    token to its copy (mass 1/n), and a token whose copy was dropped spreads its 1/n over all of y."""
    x = rng.normal(size=(n, d))
    kept = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
    order = rng.permutation(len(kept))
    y = x[kept[order]] @ np.linalg.qr(rng.normal(size=(d, d)))[0]
    target = np.zeros((n, len(kept)))
    target[kept[order], np.arange(len(kept))] = 1.0 / n
    target[np.setdiff1d(np.arange(n), kept)] = 1.0 / (n * len(kept))
    return TaskPair(x, y, target=target), kept


def test_save_and_load_give_the_pairs_back_exactly(tmp_path):
    rng = np.random.default_rng()
    seed = int(rng.integers(2**31))
    config = {"task": {"kind": "matching", "n": 6, "min_n": 3}, "train": {"seed": seed}}
    train, test = tokenflow.tasks.sample(config, 5), tokenflow.tasks.sample(config, 2, test=True)
    tokenflow.tasks.save(tmp_path / "matching", train, test)
    assert sorted(os.listdir(tmp_path / "matching" / "train")) == [f"pair_{i:06d}.npz" for i in range(5)]
    back, back_test = tokenflow.tasks.load(tmp_path / "matching")
    for p, q in zip(train + test, back + back_test):
        for name in ("x", "y", "a", "b", "target", "assignment"):
            assert np.array_equal(getattr(p, name), getattr(q, name)), (seed, name)
    # Partial couplings of different sizes: a, b default to the target's marginals; the link rows
    # (one positive entry) are the kept tokens, the others are -1.
    pairs = [partial_pair(rng, int(rng.integers(2, 8)), 3) for _ in range(4)]
    checked = tokenflow.tasks.check([p for p, _ in pairs])
    for (p, kept), q in zip(pairs, checked):
        # The core sums in its own order: each of the two sums of k terms (total <= 1) is off the exact
        # one by at most (k - 1) unit roundoffs, so they differ by at most 2 k u.
        u = 2.0**-53
        assert np.abs(q.a - p.target.sum(1)).max() <= 2 * len(p.y) * u
        assert np.abs(q.b - p.target.sum(0)).max() <= 2 * len(p.x) * u
        links = np.flatnonzero(q.assignment >= 0)
        assert np.array_equal(links, kept) or len(p.y) == 1, seed  # one column: every row is a link
    # np.savez_compressed files (deflate) read as np.savez ones do.
    os.makedirs(tmp_path / "compressed" / "train")
    os.makedirs(tmp_path / "compressed" / "test")
    for part in ("train", "test"):
        np.savez_compressed(tmp_path / "compressed" / part / "p.npz", x=train[0].x, y=train[0].y, target=train[0].target)
    back, _ = tokenflow.tasks.load(tmp_path / "compressed")
    assert np.array_equal(back[0].target, train[0].target)


def test_save_never_overwrites(tmp_path):
    pair = tokenflow.tasks.sample({"task": {"kind": "sorting", "n": 3}})
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(tokenflow.InputError, match="taken: path: exists and is not an empty folder"):
        tokenflow.tasks.save(tmp_path / "taken", pair, pair)
    assert os.listdir(tmp_path / "taken") == ["notes.txt"]
    # A bad pair: nothing is written, not even the folder.
    bad = TaskPair(pair[0].x, pair[0].y, target=-pair[0].target)
    with pytest.raises(tokenflow.InputError, match=r"pairs\[0\]: target: entry \(\d, \d\) is -0.33"):
        tokenflow.tasks.save(tmp_path / "new", [bad], pair)
    assert sorted(os.listdir(tmp_path)) == ["taken"]


def test_train_on_pairs_in_memory_equals_train_on_files(tmp_path):
    rng = np.random.default_rng()
    train = [partial_pair(rng, int(rng.integers(3, 7)), 2)[0] for _ in range(10)]
    test = [partial_pair(rng, int(rng.integers(3, 7)), 2)[0] for _ in range(3)]
    tokenflow.tasks.save(tmp_path / "data", train, test)
    from_files = tokenflow.train({**TINY, "task": {"kind": "dataset", "path": str(tmp_path / "data")}}, progress=False)
    in_memory = tokenflow.train(TINY, pairs=train, test_pairs=test, progress=False)
    # The same pairs, the same seeds: the same parameters, bit for bit.
    assert np.array_equal(from_files.model.params, in_memory.model.params)
    s = in_memory.summary
    assert s["task"] == "dataset" and s["test_pairs"] == 3 and s["training_distribution"] == "dataset: the pairs given in memory"
    assert s["test_w1"] == from_files.summary["test_w1"]
    assert 0 <= s["test_accuracy"] <= 1  # every test pair has a link row (one kept token at least)


def test_hostile_pairs_are_refused_naming_the_pair_and_the_array():
    rng = np.random.default_rng()
    good = [partial_pair(rng, 4, 2)[0] for _ in range(2)]
    nan_x = good[0].x.copy()
    nan_x[1, 0] = np.nan
    cases = [
        (dict(pairs=[good[0], TaskPair(nan_x, good[0].y, target=good[0].target)], test_pairs=good),
         r"pairs\[1\]: x: entry 2 is nan"),
        (dict(pairs=good, test_pairs=[TaskPair(good[0].x[:, :1], good[0].y[:, :1], target=good[0].target)]),
         r"test_pairs\[0\]: x: has d = 1, the dataset's d is 2"),
        (dict(pairs=[TaskPair(good[0].x, good[0].y, target=good[0].target, a=np.full(4, 0.25) + 1e-8)], test_pairs=good),
         r"pairs\[0\]: a: differs from the target's row sums"),
        (dict(pairs=[TaskPair(good[0].x, good[0].y, target=good[0].target[:, :-1])], test_pairs=good),
         r"pairs\[0\]: target: (has shape|is empty)"),  # a pair of one column has none left
        (dict(pairs=[TaskPair(good[0].x, good[0].y, target=2 * good[0].target)], test_pairs=good),
         r"pairs\[0\]: target: has total mass (2|1\.99999)"),
        (dict(pairs=good), r"test_pairs: pairs and test_pairs are given together"),
        (dict(pairs=[], test_pairs=good), r"pairs: is empty"),
    ]
    for kwargs, message in cases:
        with pytest.raises(tokenflow.InputError, match=message):
            tokenflow.train(TINY, progress=False, **kwargs)
    with pytest.raises(tokenflow.InputError, match=r'task.kind: must be "dataset" when pairs are given'):
        tokenflow.train({**TINY, "task": {"kind": "matching"}}, pairs=good, test_pairs=good, progress=False)
    with pytest.raises(tokenflow.InputError, match="task.path: is required"):
        tokenflow.train({**TINY, "task": {"kind": "dataset"}}, progress=False)


def test_single_file_form_reads_and_trains_as_the_folder_form(tmp_path):
    rng = np.random.default_rng()
    train = [partial_pair(rng, int(rng.integers(2, 8)), 2)[0] for _ in range(9)]
    test = [partial_pair(rng, int(rng.integers(2, 8)), 2)[0] for _ in range(3)]
    tokenflow.tasks.save(tmp_path / "folders", train, test)
    tokenflow.tasks.save(tmp_path / "single", train, test, single_file=True)
    assert sorted(os.listdir(tmp_path / "single")) == ["test.npz", "train.npz"]
    for p, q in zip(sum(tokenflow.tasks.load(tmp_path / "folders"), []), sum(tokenflow.tasks.load(tmp_path / "single"), [])):
        for name in ("x", "y", "a", "b", "target", "assignment"):
            assert np.array_equal(getattr(p, name), getattr(q, name)), name
    # Training reads each batch's pairs from the file: the same parameters, bit for bit.
    runs = [tokenflow.train({**TINY, "task": {"kind": "dataset", "path": str(tmp_path / form)}}, progress=False)
            for form in ("folders", "single")]
    assert np.array_equal(runs[0].model.params, runs[1].model.params)
    assert runs[0].summary["test_w1"] == runs[1].summary["test_w1"]


def test_hostile_single_files_are_refused_naming_the_file_and_the_array(tmp_path):
    rng = np.random.default_rng()
    pairs = [partial_pair(rng, int(rng.integers(2, 6)), 2)[0] for _ in range(4)]
    good = tokenflow.tasks.pack(pairs)
    rows = len(good["x"])

    def spoiled(**changes):
        return {**good, **changes}

    def with_entry(name, index, value):
        v = good[name].copy()
        v[index] = value
        return {name: v}

    cases = [
        (spoiled(**with_entry("x_offsets", 2, good["x_offsets"][1] - 1)), r"x_offsets: entry 2 \(-?\d+\) is not above entry 1"),
        (spoiled(**with_entry("x_offsets", -1, rows + 5)), rf"x_offsets: ends at {rows + 5}, x has {rows} rows"),
        (spoiled(**with_entry("y_offsets", 1, 2**62)), r"y_offsets: entry 2 \(\d+\) is not above entry 1 \(4611686018427387904\)"),
        (spoiled(x_offsets=good["x_offsets"].astype(np.float64)), r"x_offsets: has dtype <f8; offsets are int64"),
        (spoiled(target=good["target"][:-1]), r"target: has \d+ entries"),
        ({k: v for k, v in good.items() if k != "y_offsets"}, r"y_offsets: is missing"),
    ]
    for k, (arrays, message) in enumerate(cases):
        folder = tmp_path / f"case{k}"
        folder.mkdir()
        np.savez(folder / "train.npz", **arrays)
        np.savez(folder / "test.npz", **good)
        with pytest.raises(tokenflow.InputError, match=f"^{folder / 'train.npz'}: {message}"):
            tokenflow.tasks.load(folder)
    # np.savez_compressed: the pairs cannot be reached without inflating everything before them.
    folder = tmp_path / "compressed"
    folder.mkdir()
    np.savez_compressed(folder / "train.npz", **good)
    np.savez(folder / "test.npz", **good)
    with pytest.raises(tokenflow.InputError, match=r"train.npz: x: is compressed \(np.savez_compressed\).*np.savez$"):
        tokenflow.tasks.load(folder)
    config = {**TINY, "task": {"kind": "dataset", "path": str(folder)}}
    with pytest.raises(tokenflow.InputError, match=r"train.npz: x: is compressed"):
        tokenflow.train(config, progress=False)
