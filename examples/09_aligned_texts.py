"""
Texts with word alignments, from files
======================================

Texts are measures (one point per word, its vector) and a word alignment between two texts is a
coupling. Here a small corpus is generated: a vocabulary of concepts, each said with two or three
synonyms whose vectors are the concept's vector plus a little noise (the vectors file, in the
word2vec/GloVe text format ``embed`` reads); a sentence pair is a sentence and its paraphrase,
with the words reordered, every word replaced by a random synonym, and a few words ("the", "a",
"of") that have no vector. The gold links join each word to its synonym in the paraphrase. The
pairs are written as JSON lines and the model is trained from the files (``[task] kind =
"texts"``), exactly as ``tokenflow train`` would.

A second corpus adds to each paraphrase words with no counterpart (a third of its words): they
are unaligned, keep their weight in the paraphrase's measure, and no plan should link them. A
balanced final layer must send their whole weight somewhere; an unbalanced one
(``model.marginal_penalty``) may leave it untransported. A third model learns its penalty from the
data (``model.learn_marginal_penalty``, from rho = epsilon): on the paraphrases it becomes the
balanced layer, on the corpus with added words it stays unbalanced. The three models are trained
alike on both corpora, and the alignment error rate (AER, Och and Ney; every gold link is sure),
precision and recall of the plan's strongest links (the entries largest in their row and in their
column), the link mass (the share of the plan's mass on gold links) and W_1 to the gold coupling
are reported side by side, and one test pair with added words is drawn as the models couple it.
"""
import json
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import tokenflow
import tokenflow.plot

d, concepts, noise = 4, 60, 0.5
# Arguments (all optional): steps (1500), the corpus seed (2026) and the training seed (0).
corpus_seed = int(sys.argv[2]) if len(sys.argv) > 2 else 2026
train_seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
rng = np.random.default_rng(corpus_seed)
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


def sentence_pair(rng, added=False):
    """A sentence of distinct concepts and its paraphrase: reordered, synonyms; the links join the
    positions of the same concept. With `added`, the paraphrase also says half as many other
    concepts as it shares (a third of its words), which no link names."""
    k = int(rng.integers(5, 10))
    chosen = rng.choice(concepts, size=k + (k + 1) // 2, replace=False)
    x_words = [str(rng.choice(synonyms[c])) for c in chosen[:k]]
    y_concepts = list(chosen) if added else list(chosen[:k])
    order = rng.permutation(len(y_concepts))  # y's word j says concept y_concepts[order[j]]
    y_words = [str(rng.choice(synonyms[y_concepts[i]])) for i in order]
    x_tokens, x_pos = with_fillers(x_words, rng)
    y_tokens, y_pos = with_fillers(y_words, rng)
    links = [[x_pos[i], y_pos[j]] for j, i in enumerate(order) if i < k]
    return {"x": " ".join(x_tokens).capitalize() + ".", "y": " ".join(y_tokens).capitalize() + ".", "links": links}


root = Path(tempfile.mkdtemp())
with open(root / "vectors.txt", "w") as f:
    f.write(f"{len(vectors)} {d}\n")
    for w, v in vectors.items():
        f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")
for corpus, added in (("paraphrases", False), ("with-added-words", True)):
    (root / corpus).mkdir()
    for name, count in (("train.jsonl", 2000), ("test.jsonl", 100)):
        with open(root / corpus / name, "w") as f:
            for _ in range(count):
                f.write(json.dumps(sentence_pair(rng, added)) + "\n")
print("a line of with-added-words/test.jsonl:", (root / "with-added-words" / "test.jsonl").read_text().splitlines()[0])

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
MODELS = {"balanced": {}, "unbalanced (marginal_penalty 1)": {"marginal_penalty": 1.0},
          "learned marginal penalty": {"learn_marginal_penalty": True}}
results = {}
print(f"{'corpus':<17} {'final layer':<32} {'AER':>6} {'precision':>9} {'recall':>6} {'link mass':>9} {'W_1':>6} "
      f"{'rho':>8}")
for corpus in ("paraphrases", "with-added-words"):
    for name, extra in MODELS.items():
        result = tokenflow.train({"task": {"kind": "texts", "path": str(root / corpus / "train.jsonl"),
                                           "test_path": str(root / corpus / "test.jsonl"),
                                           "vectors": str(root / "vectors.txt")},
                                  "model": {"width": 32, "layers": 2, "heads": 4, "k": 16, **extra},
                                  "train": {"steps": steps, "batch": 16, "lr": 3e-3, "seed": train_seed}}, progress=False)
        s = result.summary
        results[corpus, name] = result
        rho = result.model.marginal_penalty  # the learned one for the third model; None: balanced
        print(f"{corpus:<17} {name:<32} {s['test_aer']:6.3f} {s['test_precision']:9.3f} {s['test_recall']:6.3f} "
              f"{s['test_link_mass']:9.3f} {s['test_w1']:6.3f} {'inf' if rho is None else f'{rho:.3g}':>8}")
print(f"{s['test_pairs']} test pairs per corpus, {s['steps']} steps each; the unknown fillers: {s['notes'][-1]}")
print(f"independent coupling a b^T on the last corpus: AER {s['test_aer_independent']:.3f}, "
      f"link mass {s['test_link_mass_independent']:.3f}")

# %%
# One test pair of the corpus with added words, as the two models trained on it couple it. The
# measures are the pair's known words (the fillers have no vector), uniform weights; the gold
# coupling puts each x word's weight on its link. The balanced plan must give the paraphrase's
# added words (the columns without a gold link) their whole weight; the unbalanced plan leaves
# them nearly empty, and so does the one that learned its penalty.
pair = json.loads((root / "with-added-words" / "test.jsonl").read_text().splitlines()[0])


def known_words(text):
    """The positions and vectors of the text's known words (its tokens as the links count them)."""
    tokens = text.rstrip(".").lower().split()
    kept = [p for p, t in enumerate(tokens) if t in vectors]
    return {p: row for row, p in enumerate(kept)}, np.array([vectors[tokens[p]] for p in kept])


x_rows, X = known_words(pair["x"])
y_rows, Y = known_words(pair["y"])
gold = np.zeros((len(X), len(Y)))
for i, j in pair["links"]:
    gold[x_rows[i], y_rows[j]] = 1.0 / len(X)
panels = {"gold links": gold}
for name in MODELS:
    panels[name] = results["with-added-words", name].model.couple(X, Y)
fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
vmax = max(float(m.max()) for m in panels.values())
for ax, (name, plan) in zip(axes, panels.items()):
    tokenflow.plot.heatmap(plan, title=name, ax=ax, vmax=vmax, row_label="word of x", col_label="word of y")
fig.suptitle(f"a pair with added words ({len(Y) - len(pair['links'])} of {len(Y)} words of y unlinked), "
             f"{steps} steps")
fig.tight_layout()
for name in MODELS:
    on_gold = float((panels[name] * (gold > 0)).sum() / panels[name].sum())
    print(f"{name}: {on_gold:.3f} of the plan's mass on gold links in this pair")
