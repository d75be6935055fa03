"""Texts with word alignments through tokenflow.train ([task] kind = "texts"): the alignment metrics
in the summary and the metrics, unknown words in the notes, and hostile lines refused naming the
file, the line and the key."""
import json

import numpy as np
import pytest

import tokenflow

TINY = {"model": {"width": 8, "layers": 1, "heads": 2, "k": 4, "sinkhorn_iters": 8},
        "train": {"steps": 6, "batch": 4, "lr": 1e-2}}


def write_texts(folder, rng, words=8, d=3):
    """Vectors w0..w{words-1}, and pairs whose y is a shuffled x behind an unknown "the"."""
    with open(folder / "vectors.txt", "w") as f:
        for w in range(words):
            f.write(f"w{w} " + " ".join(repr(float(v)) for v in rng.normal(size=d)) + "\n")
    for name, count in (("train.jsonl", 10), ("test.jsonl", 4)):
        with open(folder / name, "w") as f:
            for _ in range(count):
                n = int(rng.integers(2, words + 1))
                chosen = rng.choice(words, size=n, replace=False)
                order = rng.permutation(n)
                x = "The " + " ".join(f"W{c}" for c in chosen)
                y = " ".join(f"w{chosen[i]}" for i in order)
                f.write(json.dumps({"x": x, "y": y, "links": [[int(i) + 1, j] for j, i in enumerate(order)]}) + "\n")
    return {"kind": "texts", "path": str(folder / "train.jsonl"), "test_path": str(folder / "test.jsonl"),
            "vectors": str(folder / "vectors.txt")}


def test_train_on_texts_reports_alignment_scores(tmp_path):
    task = write_texts(tmp_path, np.random.default_rng())
    r = tokenflow.train({**TINY, "task": task}, progress=False)
    s = r.summary
    assert s["task"] == "texts" and s["test_pairs"] == 4
    for key in ("aer", "precision", "recall"):
        for suffix in ("", "_untrained", "_independent"):
            assert 0.0 <= s[f"test_{key}{suffix}"] <= 1.0, key + suffix
        assert len(r.metrics[f"test_{key}"]) == len(r.metrics["step"])
    # Every pair has the one unknown word "the" in x.
    assert s["notes"] == [f"{task['path']}: 1 unknown word (10 occurrences, 0 links left out): the",
                          f"{task['test_path']}: 1 unknown word (4 occurrences, 0 links left out): the"]
    # Permutation links, every x word linked: AER = 1 - F1 with P = S, so it follows from the others.
    p, q = s["test_precision"], s["test_recall"]
    assert s["test_aer"] == pytest.approx(1 - 2 * p * q / (p + q), abs=1e-12) if p + q > 0 else s["test_aer"] == 1


@pytest.mark.parametrize("line, message", [
    ('{"x": "w0", "y": "w1", "links": [[0, 3]]}', r"line 2: links: entry 0: j = 3 is out of range"),
    ('{"x": "w0", "y": "w1", "links": [[0, 0]], "weights": [-2]}', r"line 2: weights: entry 0 is -2"),
    ('{"x": "w0", "y": "w1" "links": []}', r"line 2: not JSON"),
    ('{"x": "", "y": "w1", "links": [[0, 0]]}', r"line 2: x: has no word"),
])
def test_hostile_lines_are_refused_naming_file_line_and_key(tmp_path, line, message):
    task = write_texts(tmp_path, np.random.default_rng())
    good = open(task["test_path"]).readline()
    with open(task["test_path"], "w") as f:
        f.write(good + line + "\n")
    with pytest.raises(tokenflow.InputError, match=task["test_path"] + ": " + message):
        tokenflow.train({**TINY, "task": task}, progress=False)


def test_nan_in_vectors_is_refused(tmp_path):
    task = write_texts(tmp_path, np.random.default_rng())
    with open(task["vectors"], "a") as f:
        f.write("w99 1 nan 2\n")
    with pytest.raises(tokenflow.InputError, match="vectors.txt: line 9: 'nan' is not a finite number"):
        tokenflow.train({**TINY, "task": task}, progress=False)


def write_unaligned_texts(folder, rng, words=16, d=3):
    """Pairs whose y holds x's 4 words shuffled and 4 words of its own (unaligned), and whose x has
    4 unaligned words of its own in about half the pairs. Each text has 4 or 8 known occurrences
    and its links weigh 1, so every weight is a multiple of 1/8 (exact in binary): the measures
    built here from the definition are the reader's to the last bit."""
    with open(folder / "vectors.txt", "w") as f:
        for w in range(words):
            f.write(f"w{w} " + " ".join(repr(float(v)) for v in rng.normal(size=d)) + "\n")
    lines = {}
    for name, count in (("train.jsonl", 12), ("test.jsonl", 5)):
        lines[name] = []
        with open(folder / name, "w") as f:
            for _ in range(count):
                chosen = [int(w) for w in rng.choice(words, size=12, replace=False)]
                linked, extra_y, extra_x = chosen[:4], chosen[4:8], chosen[8:] if rng.random() < 0.5 else []
                x = list(linked) + extra_x
                x = [x[k] for k in rng.permutation(len(x))]
                y = [w for w in (linked + extra_y)]
                y = [y[k] for k in rng.permutation(len(y))]
                links = [[x.index(w), y.index(w)] for w in linked]
                line = {"x": " ".join(f"w{w}" for w in x), "y": " ".join(f"w{w}" for w in y), "links": links}
                lines[name].append(line)
                f.write(json.dumps(line) + "\n")
    task = {"kind": "texts", "path": str(folder / "train.jsonl"), "test_path": str(folder / "test.jsonl"),
            "vectors": str(folder / "vectors.txt")}
    return task, lines["test.jsonl"]


def measures_by_definition(line, vectors):
    """x, a, y, b and the gold links (as point indices) of one line, from docs/design.md section 2:
    a point per distinct known word; a = N/(N+U) pi* 1 + u/(N+U)."""
    links = line["links"]
    out = []
    for side, text in enumerate((line["x"].split(), line["y"].split())):
        points = list(dict.fromkeys(text))
        linked = np.zeros(len(points))
        for link in links:
            linked[points.index(text[link[side]])] += 1.0 / len(links)
        named = {link[side] for link in links}
        unaligned = np.zeros(len(points))
        for pos, word in enumerate(text):
            if pos not in named:
                unaligned[points.index(word)] += 1.0
        N, U = len(named), unaligned.sum()
        out.append((np.array([vectors[w] for w in points]), N / (N + U) * linked + unaligned / (N + U), points))
    (x, a, px), (y, b, py) = out
    gold = {(px.index(line["x"].split()[i]), py.index(line["y"].split()[j])) for i, j in links}
    return x, a, y, b, gold


def mutual_argmax(plan):
    """The plan's strongest links: largest in their row and in their column (first index on ties)."""
    cols = plan.argmax(axis=0)
    return {(i, int(j)) for i, j in enumerate(plan.argmax(axis=1)) if cols[j] == i}


@pytest.mark.parametrize("marginal_penalty", [None, 0.5, "learned"])
def test_unaligned_words_keep_their_mass_and_the_metrics_follow_the_plans(tmp_path, marginal_penalty):
    """Texts with unaligned words load, train and couple, balanced, unbalanced and with a learned
    penalty; test_link_mass and AER recomputed from the plans of the returned model on measures
    built from the definition."""
    task, test_lines = write_unaligned_texts(tmp_path, np.random.default_rng())
    model = dict(TINY["model"])
    if marginal_penalty == "learned":
        model.update(marginal_penalty=0.5, learn_marginal_penalty=True)
    elif marginal_penalty is not None:
        model["marginal_penalty"] = marginal_penalty
    r = tokenflow.train({**TINY, "model": model, "task": task, "train": {**TINY["train"], "test_pairs": 5}},
                        progress=False)
    s = r.summary
    assert s["status"] == "finished" and np.isfinite(s["test_loss"])
    vectors = {line.split()[0]: np.array([float(v) for v in line.split()[1:]])
               for line in open(task["vectors"])}
    shares, predicted, sure, predicted_sure = [], 0, 0, 0
    for line in test_lines:
        x, a, y, b, gold = measures_by_definition(line, vectors)
        # The evaluated plan is the training-time (unrolled) plan of the last model, on these measures.
        plan = r.model.couple(x, y, a, b, unrolled=True)
        shares.append(sum(plan[i, j] for i, j in gold) / plan.sum())
        A = mutual_argmax(plan)
        predicted, sure, predicted_sure = predicted + len(A), sure + len(gold), predicted_sure + len(A & gold)
        converged = r.model.couple(x, y, a, b)
        unaligned_y = [j for j in range(len(b)) if all(j != g[1] for g in gold)]
        if marginal_penalty is None:
            # A balanced plan sends every unaligned word its whole weight (l1 marginal error < tol
            # 1e-9), so its link mass is at most 1 - (the unaligned words' share of y) = 1/2.
            assert np.abs(converged.sum(axis=0) - b).sum() < 1e-9
            assert np.abs(converged.sum(axis=1) - a).sum() < 1e-9
            assert sum(converged[i, j] for i, j in gold) <= 1 - b[unaligned_y].sum() + 1e-9
    # The same plans and the same sums, added in another order: a share of at most 64 entries
    # and its mean over 5 pairs are within about 70 roundings, 2e-14 relative.
    assert s["test_link_mass"] == pytest.approx(np.mean(shares), rel=1e-13)
    assert 0.0 < s["test_link_mass"] <= 1.0
    # P = S: AER = 1 - 2 |A & S| / (|A| + |S|); a predicted link of an unaligned word is in A, not in S.
    assert s["test_aer"] == pytest.approx(1 - 2 * predicted_sure / (predicted + sure), abs=1e-15)
    assert s["test_precision"] == pytest.approx(predicted_sure / predicted, abs=1e-15)
    assert s["test_recall"] == pytest.approx(predicted_sure / sure, abs=1e-15)
    assert len(r.metrics["test_link_mass"]) == len(r.metrics["step"])
    for suffix in ("_untrained", "_independent"):
        assert 0.0 < s["test_link_mass" + suffix] <= 1.0
    # The independent coupling a b^T puts a_i b_j on each link: its mean share, exactly.
    independent = [sum(a[i] * b[j] for i, j in gold) for x, a, y, b, gold in
                   (measures_by_definition(line, vectors) for line in test_lines)]
    assert s["test_link_mass_independent"] == pytest.approx(np.mean(independent), rel=1e-14)


def write_shuffled_texts(folder, rng, added, words=16, d=3, count=60):
    """Pairs whose y holds x's 4 words shuffled, plus (with `added`) 2 words of its own that no link
    names."""
    with open(folder / "vectors.txt", "w") as f:
        for w in range(words):
            f.write(f"w{w} " + " ".join(repr(float(v)) for v in rng.normal(size=d)) + "\n")
    for name, lines in (("train.jsonl", count), ("test.jsonl", 5)):
        with open(folder / name, "w") as f:
            for _ in range(lines):
                chosen = [int(w) for w in rng.choice(words, size=6, replace=False)]
                linked = chosen[:4]
                x = [linked[k] for k in rng.permutation(4)]
                y = linked + (chosen[4:] if added else [])
                y = [y[k] for k in rng.permutation(len(y))]
                f.write(json.dumps({"x": " ".join(f"w{w}" for w in x), "y": " ".join(f"w{w}" for w in y),
                                    "links": [[x.index(w), y.index(w)] for w in linked]}) + "\n")
    return {"kind": "texts", "path": str(folder / "train.jsonl"), "test_path": str(folder / "test.jsonl"),
            "vectors": str(folder / "vectors.txt")}


@pytest.mark.parametrize("grad", ["unrolled", "implicit"])
def test_a_learned_marginal_penalty_follows_the_texts(tmp_path, grad):
    """model.learn_marginal_penalty from rho = eps (relaxation eps / rho = 1): texts whose every word
    has a counterpart pull the relaxation towards 0 (the balanced layer), texts where a third of
    y's words have none keep it high. Measured over 9 fresh corpora per kind, both gradients (600
    steps): the first ended in [0, 0.35], the second in [0.75, 0.93]."""
    learned = {}
    for added in (False, True):
        rng = np.random.default_rng()
        folder = tmp_path / f"added-{added}"
        folder.mkdir()
        task = write_shuffled_texts(folder, rng, added)
        r = tokenflow.train({"task": task,
                             "model": {"width": 16, "layers": 1, "heads": 2, "k": 8, "sinkhorn_iters": 10,
                                       "marginal_penalty": 1.0, "learn_marginal_penalty": True, "sinkhorn_grad": grad},
                             "train": {"steps": 600, "batch": 8, "lr": 1e-2, "test_pairs": 5,
                                       "seed": int(rng.integers(1 << 30))}}, progress=False)
        learned[added] = r.summary["marginal_relaxation_learned"]
        assert learned[added] == r.model.params[-1] >= 0.0
    assert learned[False] < 0.5 < learned[True], learned
