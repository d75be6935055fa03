"""docs/ARCHITECTURE.md's layers, read from the code's own #include lines.

From the bottom up:
  storage   src/storage: .npy, durable files, records, output folders, the checkpoint container;
            anyone may use it. Besides itself it sees only the points type (measure.hpp).
  library   src/linalg, measure, simd, kernel, ot, attention, fast_gauss, integrator, dynamics, gaussian,
            model, distributed, equiangular, metastability: typed structs in, typed results out; no
            TOML, JSON, config or summary header. Inside it, ot knows nothing of attention (nor of
            dynamics and model, which use ot), and the kernel they share (src/kernel: the tiled
            sweep) sees only simd and itself.
  studies   src/studies: what puts two parts of the library side by side (meanfield and stability:
            particles against the Gaussian closure).
  config    src/config: TOML, the key schemas, the readers, summary.json and other JSON, and the
            files whose payload is a config (model.bin, train's checkpoint.bin).
  faces     src/cli, src/distributed/world (MPI), python/src.
A file may include headers of its own layer and of the layers below it, never above. Every public
header (include/tokenflow) belongs to exactly one layer, so a new header must be placed here.
"""
import re

from conftest import ROOT

ORDER = ["storage", "library", "studies", "config", "faces"]
FOLDERS = {
    "storage": ["src/storage"],
    "library": ["src/linalg", "src/measure", "src/simd", "src/kernel", "src/ot", "src/attention", "src/fast_gauss", "src/integrator",
                "src/dynamics", "src/gaussian", "src/model", "src/distributed", "src/equiangular",
                "src/metastability"],
    "studies": ["src/studies"],
    "config": ["src/config"],
    "faces": ["src/cli", "src/distributed/world", "python/src"],
}
HEADERS = {
    "storage": {"checkpoint", "dir_lock", "durable_file", "echo", "error", "input_file", "io", "memory_budget",
                "npy_header", "output_dir", "output_manifest", "records", "run_files"},
    "library": {"adamw", "attention", "coupling_source", "distributed", "dynamics", "embed", "energy", "equiangular",
                "fast_gauss", "gaussian", "gradient_check", "layers", "linalg", "measure", "metastability", "model",
                "normalization_schemes", "ot", "ot_batch", "ot_kernel", "ot_multiscale", "ot_solve", "parallel",
                "plan_adjoint", "run_spec", "simulation_checkpoint", "tasks", "train", "wasserstein"},
    "studies": {"meanfield", "stability"},
    "config": {"command_keys", "config", "dataset", "model_file", "packed_pairs", "readers", "schema", "summary",
               "texts", "train_checkpoint", "train_config"},
}
# What storage may see of the library: the points type it reads and writes (io.hpp's read_points).
STORAGE_SEES = {"measure"}
# toml++, nlohmann/json, src/config's JSON helpers and summary documents, the config and summary headers.
FORBIDDEN = re.compile(r'#\s*include\s*[<"][^>"]*(toml|nlohmann|json|config|summar)[^>"]*[>"]')
# Quoted includes, and tokenflow's headers in angle brackets.
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(tokenflow/[^>]+)>)', re.M)


def layer_of_file(path):
    """The layer of a source file: the longest folder prefix that holds it."""
    rel = path.relative_to(ROOT).as_posix()
    best = None
    for layer, folders in FOLDERS.items():
        for folder in folders:
            if rel.startswith(folder + "/") and (best is None or len(folder) > len(best[1])):
                best = (layer, folder)
    return best[0] if best else None


def header_layer(name):
    for layer, names in HEADERS.items():
        if name in names:
            return layer
    return None


def sources(layers):
    files = []
    for layer in layers:
        for folder in FOLDERS[layer]:
            files += [p for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".cpp", ".hpp")]
    return [p for p in files if layer_of_file(p) in layers]


def included(path):
    """(text, layer) of every quoted include: tokenflow/X.hpp by HEADERS, a relative path by its folder."""
    for quoted, angled in INCLUDE.findall(path.read_text()):
        target = quoted or angled
        if target.startswith("tokenflow/"):
            yield target, header_layer(target[len("tokenflow/"):-len(".hpp")])
        else:
            yield target, layer_of_file((path.parent / target).resolve())


def test_every_public_header_has_one_layer():
    names = {p.stem for p in (ROOT / "include" / "tokenflow").glob("*.hpp")}
    placed = [n for layer in HEADERS.values() for n in layer]
    assert sorted(placed) == sorted(set(placed)), "a header is placed in two layers"
    assert names == set(placed), f"unplaced: {sorted(names - set(placed))}; gone: {sorted(set(placed) - names)}"


def test_every_source_folder_has_a_layer():
    folders = {p.relative_to(ROOT).as_posix() for p in (ROOT / "src").iterdir() if p.is_dir()}
    placed = {f for layer in FOLDERS.values() for f in layer}
    assert folders <= placed, f"src folders with no layer: {sorted(folders - placed)}"


def public_headers():
    return sorted((ROOT / "include" / "tokenflow").glob("*.hpp"))


def test_includes_point_down():
    files = sources(ORDER)
    assert len(files) > 100  # the folders were found
    wrong = []
    # The public headers too, each in the layer HEADERS places it in.
    for path in files + public_headers():
        layer_here = header_layer(path.stem) if path.parent.name == "tokenflow" else layer_of_file(path)
        own = ORDER.index(layer_here)
        for target, layer in included(path):
            assert layer is not None, f"{path.relative_to(ROOT)}: cannot place {target}"
            seen_by_storage = ORDER[own] == "storage" and target.removeprefix("tokenflow/").removesuffix(".hpp") in STORAGE_SEES
            if ORDER.index(layer) > own and not seen_by_storage:
                wrong.append(f"{path.relative_to(ROOT)} ({ORDER[own]}) includes {target} ({layer})")
    assert wrong == [], "includes must point down the layers:\n" + "\n".join(wrong)


def test_storage_sees_only_storage_and_the_points_type():
    wrong = [f"{p.relative_to(ROOT)}: {t}" for p in sources(["storage"]) for t, layer in included(p)
             if layer != "storage" and t.removeprefix("tokenflow/").removesuffix(".hpp") not in STORAGE_SEES]
    assert wrong == []


def test_below_config_nothing_reads_or_formats_a_config():
    files = sources(["storage", "library", "studies"])
    files += [p for p in public_headers() if header_layer(p.stem) != "config"]
    assert len(files) > 80
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in FORBIDDEN.finditer(p.read_text())]
    assert found == [], "the library must not format or read configs:\n" + "\n".join(found)


def test_the_integrator_and_the_closure_stand_alone():
    # The integrator knows no attention, particles or moments; the Gaussian closure needs no particles.
    integrator = [t for p in (ROOT / "src/integrator").iterdir() for t, layer in included(p)
                  if layer == "library" and t not in ("tokenflow/run_spec.hpp",)]
    assert integrator == []
    gaussian = [t for p in (ROOT / "src/gaussian").iterdir() for t, _ in included(p)
                if "dynamics" in t or t == "tokenflow/simulation_checkpoint.hpp"]
    assert gaussian == []


def test_the_rules_see_what_they_forbid(tmp_path):
    assert FORBIDDEN.search('#include <nlohmann/json.hpp>') and FORBIDDEN.search('#include "../config/summary_documents.hpp"')
    assert FORBIDDEN.search('#include "tokenflow/config.hpp"') and not FORBIDDEN.search('#include "tokenflow/ot.hpp"')
    probe = ROOT / "src" / "model" / "train.cpp"
    assert layer_of_file(probe) == "library" and layer_of_file(ROOT / "src/distributed/world/mpi.cpp") == "faces"
    assert header_layer("train_config") == "config" and header_layer("checkpoint") == "storage"
    assert layer_of_file((ROOT / "src/cli" / "../config/summary_documents.hpp").resolve()) == "config"


# The parts above ot, by folder and by public header: ot must include none of them.
ABOVE_OT = {
    "folders": ["src/attention", "src/dynamics", "src/model"],
    "headers": {"adamw", "attention", "coupling_source", "dynamics", "embed", "energy", "gradient_check", "layers",
                "model", "simulation_checkpoint", "tasks", "train"},
}
OT_HEADERS = {"ot", "ot_batch", "ot_kernel", "ot_multiscale", "ot_solve", "parallel", "plan_adjoint", "wasserstein"}


def part_of(path, target):
    """The src/ folder (or tokenflow/NAME) that an include line of `path` names."""
    if target.startswith("tokenflow/"):
        return target.removesuffix(".hpp")
    rel = (path.parent / target).resolve().relative_to(ROOT).as_posix()
    return "/".join(rel.split("/")[:2])


def reaches_above_ot(path, target):
    part = part_of(path, target)
    return part in ABOVE_OT["folders"] or part.removeprefix("tokenflow/") in ABOVE_OT["headers"]


def test_ot_knows_nothing_of_attention():
    files = sorted((ROOT / "src/ot").rglob("*.[ch]pp"))
    files += [ROOT / "include/tokenflow" / f"{name}.hpp" for name in sorted(OT_HEADERS)]
    assert len(files) > 20 and all(p.exists() for p in files)
    wrong = [f"{p.relative_to(ROOT)} includes {t}" for p in files for t, _ in included(p) if reaches_above_ot(p, t)]
    assert wrong == [], "ot must not include attention, dynamics or model (shared code goes to src/kernel):\n" + \
        "\n".join(wrong)


def test_the_kernel_sees_only_simd_and_itself():
    files = sorted((ROOT / "src/kernel").rglob("*.[ch]pp"))
    assert any(p.name == "sweep.hpp" for p in files)
    wrong = [f"{p.relative_to(ROOT)} includes {t}" for p in files for t, _ in included(p)
             if part_of(p, t) not in ("src/kernel", "src/simd")]
    assert wrong == []


def test_the_part_rules_see_what_they_forbid():
    softmin = ROOT / "src/ot/softmin.cpp"
    assert reaches_above_ot(softmin, "../attention/sweep.hpp")
    assert reaches_above_ot(softmin, "../model/parallel_for.hpp")
    assert reaches_above_ot(softmin, "tokenflow/attention.hpp")
    assert not reaches_above_ot(softmin, "../kernel/sweep.hpp") and not reaches_above_ot(softmin, "tokenflow/ot.hpp")
    assert part_of(ROOT / "src/kernel/sweep.hpp", "../simd/exp.hpp") == "src/simd"
    assert part_of(ROOT / "src/kernel/sweep.hpp", "logits.hpp") == "src/kernel"
