"""Fuzz cases of kind ``checkpoint``: broken checkpoints and run configs read by eval, export and resume.

The good run (``GoodInputs.run``) has checkpoints ``step_000000000128`` and ``step_000000000256``. Eval and
export read the newest strictly: breaking it must give exit 2 naming the file, with the older, intact one
untouched (protected). Resume falls back past a broken newest checkpoint on its own (that success is a
regression test in tests/test_checkpoint_integrity.py); here every checkpoint or the config is broken, so
resume must refuse, changing nothing.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from fuzz_harness import TRAIN_TINY, FuzzCase, GoodInputs

NEW, OLD = "step_000000000256", "step_000000000128"
PROTECT_OLD = (f"run/checkpoints/{OLD}",)
PROTECT_ALL = ("run/checkpoints",)

Edit = Callable[[Path], None]
"""Breaks something inside a copied run directory."""


def _copy_run(case_dir: Path, good: GoodInputs) -> Path:
    run = case_dir / "run"
    shutil.copytree(good.run, run)
    return run


def _resum(ckpt: Path) -> None:
    """Rewrite SHA256SUMS to match the (altered) files, so only the deeper checks can catch them."""
    names = ("state.safetensors", "state.yaml")
    (ckpt / "SHA256SUMS").write_text("".join(f"{hashlib.sha256((ckpt / n).read_bytes()).hexdigest()}  {n}\n"
                                             for n in names))


def overwrite(name: str, offset_fraction: float, size: int) -> Edit:
    def edit(ckpt: Path) -> None:
        data = bytearray((ckpt / name).read_bytes())
        at = int(len(data) * offset_fraction)
        data[at:at + size] = bytes((i * 37 + 11) % 256 for i in range(len(data[at:at + size])))
        (ckpt / name).write_bytes(bytes(data))
    return edit


def truncate(name: str, keep: float | int) -> Edit:
    def edit(ckpt: Path) -> None:
        data = (ckpt / name).read_bytes()
        n = keep if isinstance(keep, int) else int(len(data) * keep)
        (ckpt / name).write_bytes(data[:n])
    return edit


def remove(name: str) -> Edit:
    return lambda ckpt: (ckpt / name).unlink()


def write(name: str, text: str, resum: bool = False) -> Edit:
    def edit(ckpt: Path) -> None:
        (ckpt / name).write_text(text)
        if resum:
            _resum(ckpt)
    return edit


def nan_tensors(ckpt: Path) -> None:
    """Every float tensor NaN, checksums updated: only the finite-value check can refuse it."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(ckpt / "state.safetensors")
    save_file({k: v.fill_(float("nan")) if v.is_floating_point() else v for k, v in tensors.items()},
              ckpt / "state.safetensors")
    _resum(ckpt)


def yaml_replace(old: str, new: str) -> Edit:
    def edit(ckpt: Path) -> None:
        text = (ckpt / "state.yaml").read_text()
        assert old in text, old
        (ckpt / "state.yaml").write_text(text.replace(old, new, 1))
        _resum(ckpt)
    return edit


def config_edit(text_edit: Callable[[str], str]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        path = run / "config.yaml"
        path.write_text(text_edit(path.read_text()))
    return edit


def _ckpt_case(name: str, command: str, edit: Edit, expect: tuple[str, ...]) -> FuzzCase:
    """Break the newest checkpoint; ``command`` is eval or export."""
    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        run = _copy_run(case_dir, good)
        edit(run / "checkpoints" / NEW)
        return ["eval", run, "--episodes", "1"] if command == "eval" else ["export", run]

    return FuzzCase(f"checkpoint/{command}: {name}", "checkpoint", make, (NEW, *expect), PROTECT_OLD)


def _run_case(name: str, command: str, edit: Callable[[Path], None], expect: tuple[str, ...]) -> FuzzCase:
    """Break the run directory itself (config.yaml, every checkpoint); ``command``: eval, export, resume, or
    init_from (a new run, in the case directory, fine-tuning from it; ``init_from+<override>`` adds one)."""
    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        run = _copy_run(case_dir, good)
        edit(run)
        if command.startswith("init_from"):
            extra = command.split("+")[1:]
            return ["train", *TRAIN_TINY, f"init_from={run}", *extra, f"hydra.run.dir={case_dir / 'new'}"]
        return {"eval": ["eval", run, "--episodes", "1"], "export": ["export", run],
                "resume": ["train", f"resume={run}"]}[command]

    return FuzzCase(f"checkpoint/{command}: {name}", "checkpoint", make, expect, PROTECT_ALL)


def _every_checkpoint(edit: Edit) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        for ckpt in sorted((run / "checkpoints").iterdir()):
            edit(ckpt)
    return apply


def cases() -> list[FuzzCase]:
    """Broken checkpoint files (eval/export), broken config.yaml (eval/export/resume), nothing intact (resume)."""
    st, sy, sums = "state.safetensors", "state.yaml", "SHA256SUMS"
    ckpt = [
        ("4 KB overwritten in state.safetensors", "eval", overwrite(st, 0.3, 4096), (st, "checksum")),
        ("4 KB overwritten in state.safetensors", "export", overwrite(st, 0.3, 4096), (st, "checksum")),
        ("one byte of the safetensors header changed", "eval", overwrite(st, 0.0, 1), (st,)),
        ("state.safetensors truncated to half", "eval", truncate(st, 0.5), (st,)),
        ("state.safetensors truncated to 100 bytes", "export", truncate(st, 100), (st,)),
        ("state.safetensors zero bytes", "eval", truncate(st, 0), (st,)),
        ("state.safetensors missing", "eval", remove(st), (st, "missing")),
        ("state.yaml zero bytes", "eval", truncate(sy, 0), (sy,)),
        ("state.yaml zero bytes", "export", truncate(sy, 0), (sy,)),
        ("state.yaml truncated", "eval", truncate(sy, 0.5), (sy,)),
        ("state.yaml garbage bytes", "eval", overwrite(sy, 0.0, 512), (sy,)),
        ("state.yaml missing", "export", remove(sy), (sy, "missing")),
        ("state.yaml a list, checksums updated", "eval", write(sy, "- 1\n- 2\n", resum=True), (sy, "mapping")),
        ("state.yaml not YAML, checksums updated", "eval", write(sy, "step: [unclosed\n", resum=True), (sy, "YAML")),
        ("state.yaml schema 99, checksums updated", "eval", yaml_replace("schema_version: 2", "schema_version: 99"),
         (sy, "schema")),
        ("state.yaml names a tensor the file lacks", "eval",
         yaml_replace("__tensor__: agent/actor", "__tensor__: agent/nowhere"), (sy, "tensor")),
        ("state.yaml state a number", "eval", write(sy, "schema_version: 2\nstep: 256\nstate: 7\n", resum=True),
         (sy, "mapping")),
        ("state.yaml step negative", "export", yaml_replace("\nstep: 256", "\nstep: -5"), (sy, "step")),
        ("NaN-filled tensors, checksums updated", "eval", nan_tensors, ("non-finite",)),
        ("NaN-filled tensors, checksums updated", "export", nan_tensors, ("non-finite",)),
        ("SHA256SUMS missing", "eval", remove(sums), (sums, "missing")),
        ("SHA256SUMS empty", "export", truncate(sums, 0), (sums,)),
        ("SHA256SUMS garbage", "eval", write(sums, "not a checksum file\n"), (sums,)),
    ]
    cfg = [
        ("config.yaml zero bytes", "eval", config_edit(lambda t: ""), ("config.yaml", "empty")),
        ("config.yaml truncated", "export", config_edit(lambda t: t[: len(t) // 3]), ("config.yaml",)),
        ("config.yaml a list", "eval", config_edit(lambda t: "- a\n- b\n"), ("config.yaml", "mapping")),
        ("config.yaml not YAML", "export", config_edit(lambda t: "agent: {learning_rate: [\n"),
         ("config.yaml", "YAML")),
        ("config.yaml missing", "export", lambda run: (run / "config.yaml").unlink(), ("config.yaml",)),
        ("config.yaml learning_rate nan", "eval",
         config_edit(lambda t: t.replace("learning_rate: 0.001", "learning_rate: .nan", 1)),
         ("config.yaml", "agent.learning_rate")),
        ("config.yaml unknown agent key", "eval", config_edit(lambda t: t.replace("agent: ppo", "agent: nosuch")),
         ("config.yaml", "keys.agent")),
        ("config.yaml actor shape changed", "eval",
         config_edit(lambda t: t.replace("actor_hidden_dims:\n  - 16", "actor_hidden_dims:\n  - 24", 1)),
         (NEW, "config.yaml")),
        ("config.yaml zero bytes", "resume", config_edit(lambda t: ""), ("config.yaml",)),
        ("config.yaml seed -1", "resume", config_edit(lambda t: t.replace("\nseed: 0", "\nseed: -1", 1)),
         ("config.yaml", "seed")),
        ("every checkpoint overwritten", "resume", _every_checkpoint(overwrite(st, 0.3, 4096)),
         ("no intact checkpoint", st)),
        ("every state.yaml zero bytes", "resume", _every_checkpoint(truncate(sy, 0)), ("no intact checkpoint", sy)),
        ("no checkpoints", "resume", lambda run: shutil.rmtree(run / "checkpoints"), ("checkpoints",)),
        ("no checkpoints", "init_from", lambda run: shutil.rmtree(run / "checkpoints"), ("init_from", "checkpoint")),
        ("every checkpoint overwritten", "init_from", _every_checkpoint(overwrite(st, 0.3, 4096)),
         ("init_from", "no intact checkpoint")),
        ("another actor shape", "init_from+agent.actor_hidden_dims=[24]", lambda run: None,
         ("init_from", "does not fit", "checkpoints/step_")),
        ("with resume=", "init_from+resume=elsewhere", lambda run: None, ("init_from", "resume")),
    ]
    return ([_ckpt_case(n, c, e, x) for n, c, e, x in ckpt] + [_run_case(n, c, e, x) for n, c, e, x in cfg])
