"""
Texts with word alignments, from files
======================================

Texts are measures (one point per word, its vector) and a word alignment between two texts is a
coupling. Here a small corpus is generated: a vocabulary of concepts, each said with two or three
synonyms whose vectors are the concept's vector plus a little noise (the vectors file, in the
word2vec/GloVe text format ``embed`` reads); a sentence pair is a sentence and its paraphrase,
with the words reordered, every word replaced by a random synonym, a word sometimes left out of
the paraphrase, and a few words ("the", "a", "of") that have no vector. The gold links join each
word to its synonym in the paraphrase. The pairs are written as JSON lines and the model is
trained from the files (``[task] kind = "texts"``), exactly as ``tokenflow train`` would.

The alignment error rate (AER, Och and Ney; here every gold link is sure) of the plan's strongest
links (the entries largest in their row and in their column) is reported before and after
training, beside the independent coupling's.
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import tokenflow

d, concepts, noise = 4, 60, 0.5
rng = np.random.default_rng(2026)
syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "va", "de", "zu", "fe"]


def word(rng):
    return "".join(rng.choice(syllables, size=3))


# Each concept: a vector, and two or three distinct surface words sharing it up to noise.
centers = rng.normal(size=(concepts, d))
synonyms, vectors, used = [], {}, set()
for c in range(concepts):
    words = []
    while len(words) < int(rng.integers(2, 4)):
        w = word(rng)
        if w not in used:
            used.add(w)
            words.append(w)
            vectors[w] = centers[c] + noise * rng.normal(size=d)
    synonyms.append(words)
FILLERS = ["the", "a", "of"]  # no vector: unknown words, reported and left out


def with_fillers(words, rng):
    """The words with fillers put before some of them, and the words' positions among the tokens
    (links refer to positions in the tokenized text)."""
    tokens, positions = [], []
    for w in words:
        if rng.random() < 0.3:
            tokens.append(str(rng.choice(FILLERS)))
        positions.append(len(tokens))
        tokens.append(w)
    return tokens, positions


def sentence_pair(rng):
    """A sentence of distinct concepts and its paraphrase: reordered, synonyms, maybe one word
    dropped; the links join the positions of the same concept."""
    k = int(rng.integers(5, 10))
    chosen = rng.choice(concepts, size=k, replace=False)
    x_words = [str(rng.choice(synonyms[c])) for c in chosen]
    kept = [i for i in range(k) if not (k > 5 and rng.random() < 0.1)]
    order = rng.permutation(kept)
    y_words = [str(rng.choice(synonyms[chosen[i]])) for i in order]
    x_tokens, x_pos = with_fillers(x_words, rng)
    y_tokens, y_pos = with_fillers(y_words, rng)
    links = [[x_pos[i], y_pos[j]] for j, i in enumerate(order)]
    return {"x": " ".join(x_tokens).capitalize() + ".", "y": " ".join(y_tokens).capitalize() + ".", "links": links}


folder = Path(tempfile.mkdtemp()) / "paraphrases"
folder.mkdir()
with open(folder / "vectors.txt", "w") as f:
    f.write(f"{len(vectors)} {d}\n")
    for w, v in vectors.items():
        f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")
for name, count in (("train.jsonl", 2000), ("test.jsonl", 100)):
    with open(folder / name, "w") as f:
        for _ in range(count):
            f.write(json.dumps(sentence_pair(rng)) + "\n")
print("a line of test.jsonl:", (folder / "test.jsonl").read_text().splitlines()[0])

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
result = tokenflow.train({"task": {"kind": "texts", "path": str(folder / "train.jsonl"),
                                   "test_path": str(folder / "test.jsonl"),
                                   "vectors": str(folder / "vectors.txt")},
                          "model": {"width": 32, "layers": 2, "heads": 4, "k": 16},
                          "train": {"steps": steps, "batch": 16, "lr": 3e-3}}, progress=False)
s = result.summary
for note in s.get("notes", []):
    print("note:", note)
print(f"{s['test_pairs']} test pairs after {s['steps']} steps ({s['train_seconds']:.1f} s):")
for name in ("aer", "precision", "recall", "w1"):
    print(f"  test {name:<9} trained {s['test_' + name]:.3f}   untrained {s['test_' + name + '_untrained']:.3f}   "
          f"independent coupling {s['test_' + name + '_independent']:.3f}")
