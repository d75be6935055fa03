"""bench/update_docs.py: the measured tables and numbers of the docs, rewritten from their runs."""
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, load_json

sys.path.insert(0, str(ROOT / "bench"))
import update_docs  # noqa: E402

SCRIPT = ROOT / "bench" / "update_docs.py"


def bench_run():
    """A compare.py --json document: two comparisons (one with a goal), kernel rates and memory."""
    return {"cores": 2, "cpu": "Test CPU 9000", "date": "2026-01-02", "command": "bench/compare.py --repeats 3",
            "ceilings": {"gemm_gflops": {"f32": 200.0, "f64": 100.0}},
            "comparisons": [
                {"title": "softmax d = 2, f64", "median": {"tokenflow": 0.5, "numpy": 5.0, "torch": 7.5},
                 "ratio": {"numpy": 10.0, "torch": 15.0}, "goals": {"numpy": 5.0}, "load": [1.25, 1.5]},
                {"title": "exact OT n = 1000", "median": {"tokenflow": 0.4, "pot": 0.2},
                 "ratio": {"pot": 0.5}, "goals": {}, "load": [0.5, 0.75]}],
            "achieved": [{"dtype": "f64", "n": 4096, "d": 2, "step_seconds": 0.02, "pairs_per_s": 4096 ** 2 / 0.02,
                          "gflops": 8 * 4096 ** 2 / 0.02 / 1e9}],
            "memory": {"n": 200000, "d": 2, "peak_rss_mib": 92.4, "numpy_logits_gib": 298.0}}


OT_RUN = {"date": "2026-01-03", "cpu": "Test CPU 9000", "cores": 2, "command": "bench/ot_vs_pot.py --json x",
          "threads": "1", "load": 0.25, "sinkhorn_header": ["n", "epsilon", "solver"],
          "sinkhorn": [[1000, 0.1, "POT log"]],
          "pot_problems_header": ["problem", "epsilon", "solver"], "pot_problems": [["stabilization", 0.1, "POT log"]],
          "pot_problems_budget": 20000, "pot_problems_tol": 1e-9}


def test_ot_vs_pot_tables():
    text = update_docs.rewrite("<!-- generated: ot-vs-pot -->\n<!-- /generated -->\n", "page.md", {"ot_vs_pot": OT_RUN},
                               None)
    assert "| n | epsilon | solver |\n|---|---|---|\n| 1000 | 0.1 | POT log |" in text
    problems = update_docs.rewrite("<!-- generated: pot-problems -->\n<!-- /generated -->\n", "page.md",
                                   {"ot_vs_pot": OT_RUN}, None)
    assert "| problem | epsilon | solver |\n|---|---|---|\n| stabilization | 0.1 | POT log |" in problems
    assert "budget 20000 iterations, tol 1e-09" in problems
    assert "_Measured 2026-01-03 on Test CPU 9000 (2 cores), 1 thread each, load 0.2 at the end" in text


ONLINE_RATE_RUN = {"date": "2026-01-04", "cpu": "Test CPU 9000", "cores": 2, "threads": "1", "load": 2.0,
                   "command": "bench/ot_vs_pot.py --online-rate 15000 --json x", "n": 15000, "epsilon": 0.1,
                   "tol": 1e-6, "iterations": 10, "header": ["solver", "G pairs/s"],
                   "rows": [["tokenflow online", "0.5"]], "ratio_to_attention": {"f64": 0.75, "f32": 0.5}}


def test_online_rate_table():
    text = update_docs.rewrite("<!-- generated: online-rate -->\n<!-- /generated -->\n", "page.md",
                               {"online_rate": ONLINE_RATE_RUN}, None)
    assert "| solver | G pairs/s |\n|---|---|\n| tokenflow online | 0.5 |" in text
    assert "Online Sinkhorn / attention step: **0.75x** (float64), 0.50x (float32)." in text
    assert ("_Measured 2026-01-04 on Test CPU 9000 (2 cores), n = m = 15000 in R^3, eps 0.1, tol 1e-06, "
            "10 iterations each, 1 thread each, load 2.0 at the end, by `bench/ot_vs_pot.py --online-rate 15000 "
            "--json x`._") in text
    with pytest.raises(update_docs.SourceError, match="no 'ratio_to_attention'"):
        update_docs.rewrite("<!-- generated: online-rate -->\n<!-- /generated -->\n", "page.md",
                            {"online_rate": {k: v for k, v in ONLINE_RATE_RUN.items() if k != "ratio_to_attention"}},
                            None)


EXACT_RUN = {"date": "2026-01-05", "cpu": "Test CPU 9000", "cores": 2, "command": "bench/exact_vs_emd2.py --json x",
             "load": 1.5, "pot": "0.8.2", "repeat": 1, "header": ["n = m", "d", "emd2 call s"],
             "rows": [[2000, 2, "0.96"]], "worst_cost_difference": 1e-16}


def test_exact_vs_emd2_table():
    text = update_docs.rewrite("<!-- generated: exact-vs-emd2 -->\n<!-- /generated -->\n", "page.md",
                               {"exact_vs_emd2": EXACT_RUN}, None)
    assert "| n = m | d | emd2 call s |\n|---|---|---|\n| 2000 | 2 | 0.96 |" in text
    assert ("_Measured 2026-01-05 on Test CPU 9000 (2 cores), one thread each, POT 0.8.2, load 1.5 at the end, "
            "by `bench/exact_vs_emd2.py --json x`._") in text


UNBALANCED_RUN = {"date": "2026-01-07", "cpu": "Test CPU 9000", "cores": 2, "threads": "1", "pot": "0.8.2",
                  "tol": 1e-9, "load": 2.0, "command": "/usr/bin/python3 bench/unbalanced_vs_pot.py --json x",
                  "header": ["n", "reg", "reg_m", "POT s"], "rows": [[200, 0.05, 10.0, "0.842"]]}


def test_unbalanced_vs_pot_table():
    text = update_docs.rewrite("<!-- generated: unbalanced-vs-pot -->\nold\n<!-- /generated -->\n", "page.md",
                               {"unbalanced_vs_pot": UNBALANCED_RUN}, None)
    assert "| n | reg | reg_m | POT s |\n|---|---|---|---|\n| 200 | 0.05 | 10.0 | 0.842 |" in text
    assert "old" not in text
    assert ("_Measured 2026-01-07 on Test CPU 9000 (2 cores), 1 thread each, POT 0.8.2, both plans within 1e-09 of "
            "their fixed point, load 2.0 at the end, by `/usr/bin/python3 bench/unbalanced_vs_pot.py --json x`._") in text


THREADS_RUN = {"date": "2026-01-07", "cpu": "Test CPU 9000", "cores": 2,
               "command": "bench/python_threads.py --sizes 100 --json x", "busy": 2, "calls": 5, "rounds": 3,
               "load": [0.4, 2.9], "header": ["call", "n", "quiet: installed", "quiet: 1 thread", "ratio"],
               "rows": [["`ot.sinkhorn(a, b, M, 1e-2)`", "100", "0.001 s", "0.001 s", "**1.00x**"]]}


def test_python_threads_table():
    text = update_docs.rewrite("<!-- generated: python-threads -->\nold\n<!-- /generated -->\n", "page.md",
                               {"python_threads": THREADS_RUN}, None)
    assert "old" not in text
    assert "| `ot.sinkhorn(a, b, M, 1e-2)` | 100 | 0.001 s | 0.001 s | **1.00x** |" in text
    assert ("_Measured 2026-01-07 on Test CPU 9000 (2 cores); median of 15 calls each, in 3 alternating rounds; "
            "busy: 2 other processes spinning a Python loop; load average 0.4 - 2.9 during the run (other users' "
            "work included), by `bench/python_threads.py --sizes 100 --json x`._") in text


BATCH_RUN = {"date": "2026-01-06", "cpu": "Test CPU 9000", "cores": 2,
             "command": "/usr/bin/python3 bench/sinkhorn_batch_vs_torch.py --configs 4:10-20 --json x",
             "conditions": "d = 2, epsilon = 0.25, load 0.5 at the end",
             "header": ["pairs, sizes", "loss", "tokenflow s", "torch s", "ratio"],
             "rows": [["4, 10-20", "value", "0.1", "2.0", "**20.0x**"],
                      ["4, 10-20", "plan", "0.2", "out of memory within 1 GiB", ""]]}


def test_sinkhorn_batch_table():
    text = update_docs.rewrite("<!-- generated: sinkhorn-batch -->\nold\n<!-- /generated -->\n", "page.md",
                               {"sinkhorn_batch": BATCH_RUN}, None)
    assert "old" not in text
    assert ("| pairs, sizes | loss | tokenflow s | torch s | ratio |\n|---|---|---|---|---|\n"
            "| 4, 10-20 | value | 0.1 | 2.0 | **20.0x** |\n| 4, 10-20 | plan | 0.2 | out of memory within 1 GiB |  |"
            ) in text
    assert ("_Measured 2026-01-06 on Test CPU 9000 (2 cores), d = 2, epsilon = 0.25, load 0.5 at the end, by "
            "`/usr/bin/python3 bench/sinkhorn_batch_vs_torch.py --configs 4:10-20 --json x`._") in text


FAST_HEADER = ["attention", "d", "n", "fast", "dense", "NumPy (chunked)", "dense / fast", "NumPy / fast",
               "error / bound", "vs dense", "rows summed exactly"]
FAST_RUN = {"date": "2026-01-07", "cpu": "Test CPU 9000", "cores": 2, "weights": "random",
            "command": "bench/fast_summation.py --draws 1 --json x", "header": FAST_HEADER,
            "crossover": {"softmax, d = 2": 3000}, "exponents": {"softmax, d = 2": 0.99},
            "rows": [["softmax", 2, "1,000", "0.05 s", "0.04 s", "0.04 s", "0.8", "0.8", "4.7e-07", "8.6e-13", "0%"],
                     ["softmax", 2, "1,000,000", "10.4 s", "~28.8 min", "~1.83 h", "167", "636", "3.2e-07", "n/a", "0%"],
                     ["l2", 3, "200,000", "1.2 min", "~41.3 s", "~8.76 min", "5.73", "72.9", "4.7e-07", "n/a", "8.2%"]],
            "draws": {"header": ["draw", "attention", "d", "n", "fast", "error / bound", "rows summed exactly"],
                      "rows": [[1, "softmax", 2, "1,000,000", "7.36 s", "1.6e-06", "0%"],
                               [1, "l2", 3, "200,000", "4.47 s", "2.1e-07", "0.51%"]]}}


def test_fast_summation_table_sums_up_the_largest_sizes():
    text = update_docs.rewrite("<!-- generated: fast-summation -->\nold\n<!-- /generated -->\n", "page.md",
                               {"fast_summation": FAST_RUN}, None)
    assert "old" not in text and "| softmax | 2 | 1,000,000 | 10.4 s |" in text
    # Per d the largest n only, over both tables (minutes read as 60 s), the worst error / bound of those rows.
    assert ("At the largest sizes, over the tables above: n = 1,000,000 in d = 2: 7.36 to 10.4 s (2 runs); "
            "n = 200,000 in d = 3: 4.47 to 72 s (2 runs); the largest error / bound 1.6e-06.") in text


def test_fast_clusters_table_from_the_clustered_run():
    header = ["attention", "cloud", "heads", "n", "fast", "per head", "per head / Gaussian's", "error / bound",
              "rows summed exactly"]
    run = {"date": "2026-01-08", "cpu": "Test CPU 9000", "cores": 2, "matrices_seed": 41, "load_average": 1.5,
           "command": "bench/fast_summation.py --clustered --json build-x/fast_clusters.json", "header": header,
           "rows": [["softmax", "gaussian", 1, "200,000", "5.7 s", "5.7 s", "1.00", "1.3e-07", "0%"],
                    ["softmax", "tight", 2, "200,000", "15.2 s", "7.6 s", "1.33", "2.0e-07", "0.2%"]]}
    text = update_docs.rewrite("<!-- generated: fast-clusters -->\nold\n<!-- /generated -->\n", "page.md",
                               {"fast_clusters": run}, None)
    assert "old" not in text and "| softmax | tight | 2 | 200,000 | 15.2 s | 7.6 s | 1.33 | 2.0e-07 | 0.2% |" in text
    assert ("_Measured 2026-01-08 on Test CPU 9000 (2 cores); load average 1.5 at the end, by "
            "`bench/fast_summation.py --clustered --json build/fast_clusters.json`._") in text


TORCH_RUN = {"date": "2026-01-04", "cpu": "Test CPU 9000", "cores": 2,
             "command": "/usr/bin/python3 bench/train_vs_torch.py --steps 10 --rounds 2 --json x",
             "torch": "1.13.0a0", "blas": "generic", "rounds": 2, "steps": 10, "load": 1.25,
             "header": ["dtype", "threads", "torch ms/step", "tokenflow ms/step", "speed-up"],
             "rows": [["f32", 1, "158.7", "12.5", "12.7x"], ["f64", 1, "297.5", "43.2", "6.9x"]]}


def test_train_vs_torch_table(tmp_path):
    page = "<!-- generated: train-vs-torch -->\nold\n<!-- /generated -->\n"
    text = update_docs.rewrite(page, "page.md", {"train_vs_torch": TORCH_RUN}, None)
    assert ("| dtype | threads | torch ms/step | tokenflow ms/step | speed-up |\n|---|---:|---:|---:|---:|\n"
            "| f32 | 1 | 158.7 | 12.5 | 12.7x |\n| f64 | 1 | 297.5 | 43.2 | 6.9x |\n") in text
    assert ("_Measured 2026-01-04 on Test CPU 9000 (2 cores); torch 1.13.0a0 (BLAS_INFO=generic), best of 2 rounds "
            "of 10 steps, load 1.2 at the end, by `/usr/bin/python3 bench/train_vs_torch.py") in text
    assert "old" not in text and update_docs.rewrite(page, "page.md", {}, None) == page  # no run: as it was
    with pytest.raises(update_docs.SourceError, match="no 'blas'"):
        update_docs.rewrite(page, "page.md", {"train_vs_torch": {k: v for k, v in TORCH_RUN.items() if k != "blas"}},
                            None)
    # Through the command line: --train-vs-torch FILE, and a file that is not such a run exits 2.
    (tmp_path / "run.json").write_text(json.dumps(TORCH_RUN))
    (tmp_path / "page.md").write_text(page)
    assert run("--train-vs-torch", tmp_path / "run.json", tmp_path / "page.md").returncode == 0
    assert "| f64 | 1 | 297.5 | 43.2 | 6.9x |" in (tmp_path / "page.md").read_text()
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    r = run("--train-vs-torch", tmp_path / "bad.json", tmp_path / "page.md")
    assert r.returncode == 2 and "not a bench/train_vs_torch.py --json file" in r.stderr


PAGE = """# Speed

<!-- generated: speed -->
an old table
<!-- /generated -->

Kernels:
<!-- generated: kernels -->
<!-- /generated -->

<!-- generated: memory -->
<!-- /generated -->
"""


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_tables_are_regenerated_and_stamped(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps(bench_run()))
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert run("--check", "--bench", tmp_path / "bench.json", page).returncode == 1  # would change
    r = run("--bench", tmp_path / "bench.json", page)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "an old table" not in text
    assert "| softmax d = 2, f64 | 0.5 s | numpy | 5 s | **10.00x** | >= 5x: met |" in text
    assert "| softmax d = 2, f64 | 0.5 s | torch | 7.5 s | **15.00x** |  |" in text
    assert "| exact OT n = 1000 | 0.4 s | pot | 0.2 s | **0.50x** |  |" in text
    assert "_Measured 2026-01-02 on Test CPU 9000 (2 cores), load 0.5 - 1.2, by `bench/compare.py --repeats 3`._" in text
    assert "| f64 | 4096 | 2 | 20 | 0.84 | 6.71 | 7% |" in text  # 8 flops a pair over 20 ms: 6.71 GFLOP/s
    assert "**92 MiB** peak RSS" in text and text.count("_Measured 2026-01-02 on Test CPU 9000") == 3
    # Run again: nothing changes, and --check says so.
    assert run("--bench", tmp_path / "bench.json", page).stdout == ""
    assert run("--check", "--bench", tmp_path / "bench.json", page).returncode == 0


def test_numbers_come_from_the_reproductions(demo_dir, tmp_path):
    page = tmp_path / "page.md"
    page.write_text("slope <!-- from: meanfield slope .3f -->-9.999<!-- /from --> (theory "
                    "<!-- from: meanfield theory_slope g -->?<!-- /from -->), blow-up at "
                    "<!-- from: blowup predicted_blowup_time .4f --><!-- /from -->\n\n"
                    "<!-- generated: reproductions -->\n<!-- /generated -->\n")
    r = run("--reproductions", demo_dir, page)
    assert r.returncode == 0, r.stderr
    meanfield, blowup = load_json(demo_dir / "meanfield" / "summary.json"), load_json(demo_dir / "blowup" / "summary.json")
    demo = load_json(demo_dir / "summary.json")
    text = page.read_text()
    assert f"slope <!-- from: meanfield slope .3f -->{meanfield['slope']:.3f}<!-- /from -->" in text
    assert f"-->{meanfield['theory_slope']:g}<!--" in text
    assert f"-->{blowup['predicted_blowup_time']:.4f}<!--" in text
    assert f"at quick sizes (`--quick`), computed {demo['date']} on {demo['cpu']}" in text


@pytest.mark.parametrize("marker,message", [
    ("<!-- from: meanfield no_such_key g --><!-- /from -->", "no number at no_such_key"),
    ("<!-- from: no_such_reproduction slope g --><!-- /from -->", "no_such_reproduction/summary.json"),
    ("<!-- generated: no_such_block -->\n<!-- /generated -->", "unknown generated block 'no_such_block'"),
])
def test_a_bad_marker_exits_2_naming_the_file(demo_dir, tmp_path, marker, message):
    page = tmp_path / "page.md"
    page.write_text(marker + "\n")
    r = run("--reproductions", demo_dir, page)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(page) in r.stderr and message in r.stderr
    assert page.read_text() == marker + "\n"


def test_every_marker_in_the_docs_resolves(demo_dir):
    """The repository's own markers name blocks and numbers that a demo run has (the values differ:
    the docs quote the demo's sizes, this run is --quick)."""
    bench = bench_run()
    marked = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        numbers = len(update_docs.NUMBER.findall(text))
        # A malformed marker would not match and would keep its old number silently.
        assert numbers == len(re.findall(r"(?<!`)<!-- from:", text)), page
        assert len(update_docs.BLOCK.findall(text)) == len(re.findall(r"(?<!`)<!-- generated:", text)), page
        marked += numbers + len(update_docs.BLOCK.findall(text))
        update_docs.rewrite(text, str(page), {"bench": bench, "ot_vs_pot": OT_RUN, "exact_vs_emd2": EXACT_RUN,
                                                    "train_vs_torch": TORCH_RUN, "sinkhorn_batch": BATCH_RUN},
                            demo_dir)
    assert marked >= 5


def test_numbers_of_documented_commands(tmp_path):
    """A marker whose NAME is a folder reads the --out folder of a command the page shows, relative
    to the repository root (here tmp_path stands for it); the block "runs" says when and where."""
    run = tmp_path / "out" / "st"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"growth_constant": 4.2327, "status": "finished"}))
    page = "growth <!-- from: out/st growth_constant .2f -->?<!-- /from -->, <!-- from: out/st status s --><!-- /from -->" \
           "\n<!-- generated: runs -->\n<!-- /generated -->\n"
    text = update_docs.rewrite(page, "page.md", {}, None, tmp_path)
    assert "growth <!-- from: out/st growth_constant .2f -->4.23<!-- /from -->, " in text
    assert "-->finished<!-- /from -->" in text
    assert "_The numbers marked so in this page come from the summary.json of the commands it shows" in text
    assert "make docs-runs" in text and update_docs.cpu_model() in text
    assert update_docs.rewrite(page, "page.md", {}, None, None) == page  # without --runs: as it was
    with pytest.raises(update_docs.SourceError, match="out/gone/summary.json"):
        update_docs.rewrite("<!-- from: out/gone x g --><!-- /from -->", "page.md", {}, None, tmp_path)


def test_every_quoted_folder_is_written_by_a_documented_command():
    """make docs-runs runs, as written, the command of each folder the docs quote numbers from."""
    sys.path.insert(0, str(ROOT / "bench"))
    import doc_examples

    quoted = doc_examples.quoted_folders()
    written = {doc_examples.out_folder(command) for _, command in doc_examples.shell_examples()}
    assert quoted and quoted <= written, quoted - written


def matching_run(folder, accuracies=(0.125, 0.5, 0.95, 0.99, 0.995)):
    """A `tokenflow train --out folder` of the matching task: metrics.csv every 250 steps and summary.json."""
    folder.mkdir(parents=True)
    lines = ["step,loss,test_w1,seconds,test_loss,test_accuracy"]
    for i, a in enumerate(accuracies):
        lines.append(f"{250 * i},{2.0 - a},{0.8 * (1 - a):.6f},{2.5 * i:.6f},{2.0 - a},{a}")
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({
        "parameters": 204672, "steps": 250 * (len(accuracies) - 1), "test_pairs": 512, "threads": 2,
        "wall_seconds": 11.25, "train_seconds": 10.0, "test_accuracy_independent": 0.0625,
        "test_w1_independent": 0.848, "test_accuracy_untrained": accuracies[0], "test_w1_untrained": 0.7}))


def test_matching_table_from_the_training_run(tmp_path):
    """Block "matching": steps 0, 250, 1000 and the last of out/matching/metrics.csv, and its summary.json."""
    matching_run(tmp_path / "out" / "matching")
    page = "<!-- generated: matching -->\nold\n<!-- /generated -->\n"
    text = update_docs.rewrite(page, "page.md", {}, None, tmp_path)
    assert ("| step | seconds | test accuracy | test W_1 |\n|---:|---:|---:|---:|\n"
            "| 0 (untrained) | 0.0 | 0.125 | 0.7 |\n"
            "| 250 | 2.5 | 0.5 | 0.4 |\n| 1000 | 10.0 | **0.995** | **0.004** |\n") in text  # 500, 750 left out
    assert "204,672 parameters, 1000 steps, evaluated on 512 held-out pairs; 11.2 s wall on 2 threads" in text
    assert "accuracy 0.0625 (chance) and W_1 0.848; the untrained model has accuracy 0.125 (2.0 times chance)" in text
    assert "first met at step 500, after 5.0 s" in text and "old" not in text
    assert update_docs.rewrite(page, "page.md", {}, None, None) == page  # without --runs: as it was
    assert "out/matching" in update_docs.command_folders(page)  # make docs-runs runs its command


def test_matching_table_without_the_goal_and_without_a_run(tmp_path):
    matching_run(tmp_path / "out" / "matching", accuracies=(0.1, 0.2, 0.3))
    page = "<!-- generated: matching -->\n<!-- /generated -->\n"
    text = update_docs.rewrite(page, "page.md", {}, None, tmp_path)
    assert "| 500 | 5.0 | **0.3** | **0.56** |" in text and "was not met" in text
    (tmp_path / "out" / "matching" / "metrics.csv").unlink()
    with pytest.raises(update_docs.SourceError, match="page.md: .*out/matching/metrics.csv"):
        update_docs.rewrite(page, "page.md", {}, None, tmp_path)


STREAMING_RUN = {"date": "2026-01-05", "cpu": "Test CPU 9000", "cores": 2, "pairs": 100000, "test_pairs": 100,
                 "steps": 40, "batch": 32, "model": {"width": 16}, "bytes": {"folders": 280 * 2**20, "single": 167 * 2**20},
                 "command": "/usr/bin/python3 bench/dataset_streaming.py --json build/dataset_streaming.json",
                 "header": ["training pairs", "peak RSS", "time per step", "start (read, check, hash)"],
                 "rows": [["from disk, single file", "19 MiB", "57.48 ms", "3.1 s"]]}


def test_dataset_streaming_table(tmp_path):
    page = "<!-- generated: dataset-streaming -->\nold\n<!-- /generated -->\n"
    text = update_docs.rewrite(page, "page.md", {"dataset_streaming": STREAMING_RUN}, None)
    assert "| from disk, single file | 19 MiB | 57.48 ms | 3.1 s |\n" in text
    assert ("_Measured 2026-01-05 on Test CPU 9000 (2 cores); 100,000 training pairs (n, m in 8..16, d = 2; 280 MiB as "
            "one .npz a pair, 167 MiB as one file), 100 test pairs, batch 32, 40 steps, width 16, by ") in text
    assert "old" not in text and update_docs.rewrite(page, "page.md", {}, None) == page
    with pytest.raises(update_docs.SourceError, match="no 'bytes'"):
        update_docs.rewrite(page, "page.md", {"dataset_streaming": {k: v for k, v in STREAMING_RUN.items() if k != "bytes"}},
                            None)
