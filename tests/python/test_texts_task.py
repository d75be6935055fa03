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
