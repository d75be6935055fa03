"""The word vectors and texts of the worked example in docs/sinkhorn-transformer.md ("Texts as
measures, worked"): writes vectors.txt (word2vec text format, d = 2), cat.txt and dog.txt next to
this script.

Each word is its group's centre plus a small offset drawn from a seeded generator, so that words of
one kind (animals, verbs of rest, floor coverings, function words) lie close together:

    /usr/bin/python3 experiments/texts/make_vectors.py
"""
from pathlib import Path

import numpy as np

GROUPS = {  # centre in the plane: the words of the group
    (-1.0, 1.0): ["cat", "dog", "kitten", "puppy"],
    (1.0, 1.0): ["sat", "lay", "slept"],
    (1.0, -1.0): ["mat", "rug", "carpet"],
    (-1.0, -1.0): ["the", "a", "on"],
}
TEXTS = {"cat.txt": "The cat sat on the mat.\nThe kitten slept on the mat.\n",
         "dog.txt": "A dog lay on a rug.\nA puppy slept on the carpet.\n"}


def main(folder: Path = Path(__file__).resolve().parent) -> None:
    rng = np.random.default_rng(2024)
    lines = []
    for centre, words in GROUPS.items():
        for word in words:
            v = np.asarray(centre) + rng.normal(scale=0.2, size=2)
            lines.append(f"{word} {v[0]:.4f} {v[1]:.4f}")
    (folder / "vectors.txt").write_text(f"{len(lines)} 2\n" + "\n".join(lines) + "\n")
    for name, text in TEXTS.items():
        (folder / name).write_text(text)


if __name__ == "__main__":
    main()
