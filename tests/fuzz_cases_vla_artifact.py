"""Fuzz cases of kind ``vla_artifact``: a broken VLA policy artifact (``inputs: vla``) handed to
``deploy check --robot so101``.

Each case copies the good VLA artifact (:meth:`fuzz_harness.GoodInputs.vla_artifact`: cameras front + wrist,
32x32, chunk 4, 8 tokens; exported once per session) and breaks one thing, resealed so the checksums pass
(unless the case is about tampering): every ``vla:`` field out of range or of the wrong type, cameras and topics
that do not match each other or the graph, instructions the tokenizer cannot encode, a tokenizer outside the
artifact, missing, not JSON, with other specials or ids the graph does not embed, ``inputs`` inconsistent with
the sections, and ONNX graphs whose input types or shapes differ from policy.yaml's.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fuzz_cases_artifact import INF, NAN, replace_onnx, reseal
from fuzz_harness import MISSING, FuzzCase, GoodInputs, set_key

KIND = "vla_artifact"


def _copy(case_dir: Path, good: GoodInputs) -> Path:
    art = case_dir / "policy"
    shutil.copytree(good.vla_artifact(), art)
    return art


def _argv(art: Path) -> list[str]:
    return ["deploy", "check", str(art), "--robot", "so101", "--runs", "1"]


def _edit_yaml(art: Path, edit: Callable[[dict], None]) -> None:
    data = yaml.safe_load((art / "policy.yaml").read_text())
    edit(data)
    (art / "policy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _case(name: str, change: Callable[[Path], None], expect: tuple[str, ...], sealed: bool = True,
          source: Callable[[GoodInputs], Path] | None = None) -> FuzzCase:
    """A copy of the VLA artifact (or of ``source(good)``) changed by ``change(art)``; resealed unless ``sealed``
    is False (tampering)."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        art = case_dir / "policy"
        if source is None:
            _copy(case_dir, good)
        else:
            shutil.copytree(source(good), art)
        change(art)
        if sealed:
            reseal(art)
        return _argv(art)

    return FuzzCase(f"{KIND}/{name}", KIND, make, expect=expect)


def _value_case(dotted: str, value: Any, key: str, *more: str) -> FuzzCase:
    shown = "missing" if value is MISSING else repr(value)
    return _case(f"{dotted}={shown}", lambda a: _edit_yaml(a, lambda d: set_key(d, dotted, value)),
                 ("policy.yaml", key, *more))


def _onnx_mismatch(name: str, graph: dict[str, Any], key: str) -> FuzzCase:
    return _case(f"onnx_{name}", lambda a: replace_vla_onnx(a, **graph), ("policy.onnx", key))


def replace_vla_onnx(art: Path, image_dtype: str = "uint8", tokens_dtype: str = "int64",
                     noise_shape: tuple[int, ...] = (4, 6)) -> None:
    """Replace policy.onnx by a small graph with policy.yaml's input names (cameras front, wrist; 8 tokens) and an
    ``action [B, 24]`` output, of which one input type or shape differs as given."""
    import torch

    class Graph(torch.nn.Module):
        def forward(self, front, wrist, tokens, mask, state, noise):  # every input used, so none is pruned
            scalar = front.float().mean() + wrist.float().mean() + tokens.float().sum() + mask.float().sum()
            return state.repeat(1, 4) + noise.reshape(noise.shape[0], -1)[:, :1] + scalar

    image = torch.zeros(1, 3, 32, 32, dtype=getattr(torch, image_dtype))
    inputs = (image, image.clone(), torch.zeros(1, 8, dtype=getattr(torch, tokens_dtype)),
              torch.zeros(1, 8, dtype=torch.bool), torch.zeros(1, 6), torch.zeros(1, *noise_shape))
    names = ["image_front", "image_wrist", "tokens", "token_mask", "state", "noise"]
    buffer = io.BytesIO()
    torch.onnx.export(Graph(), inputs, buffer, input_names=names, output_names=["action"],
                      dynamic_axes={n: {0: "batch"} for n in [*names, "action"]}, opset_version=17, dynamo=False)
    (art / "policy.onnx").write_bytes(buffer.getvalue())


def _tokenizer_json(art: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads((art / "tokenizer.json").read_text())
    edit(data)
    (art / "tokenizer.json").write_text(json.dumps(data))


def _swap_specials(data: dict) -> None:
    vocab = data["model"]["vocab"]
    vocab["[PAD]"], vocab["[UNK]"] = 1, 0
    for token in data["added_tokens"]:
        token["id"] = 1 - token["id"]


def _add_token_beyond_the_embedding(art: Path) -> None:
    """A word with a new id (the vocabulary size): the graph's embedding has no row for it."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(art / "tokenizer.json"))
    tokenizer.add_tokens(["purple"])
    tokenizer.save(str(art / "tokenizer.json"))


BAD_WHOLE = [-32, 0, 10**9, NAN, INF, True, "32"]
VALUES = [
    *[("vla.height", v, "vla.height") for v in BAD_WHOLE],
    *[("vla.width", v, "vla.width") for v in (-1, 0, 5000, NAN, False, "wide")],
    *[("vla.max_text_len", v, "vla.max_text_len") for v in (0, -8, 10**6, INF, True, "8")],
    *[("vla.flow_steps", v, "vla.flow_steps") for v in (0, -3, 10**9, NAN, True, "3")],
    ("vla.height", MISSING, "vla.height"),
    ("vla.resize", "bilinear", "vla.resize"),
    ("vla.resize", None, "vla.resize"),
    ("vla.resize", 1, "vla.resize"),
    ("vla.cameras", [], "vla.cameras"),
    ("vla.cameras", ["front", "front"], "vla.cameras"),
    ("vla.cameras", "front", "vla.cameras"),
    ("vla.cameras", [1, 2], "vla.cameras"),
    ("vla.cameras", ["front cam", "wrist"], "vla.cameras"),
    ("vla.cameras", ["front"], "vla.image_topics"),
    ("vla.image_topics", ["camera/front/image_raw"], "vla.image_topics"),
    ("vla.image_topics", ["a", "b", "c"], "vla.image_topics"),
    ("vla.image_topics", ["", "camera/wrist/image_raw"], "vla.image_topics"),
    ("vla.image_topics", "camera", "vla.image_topics"),
    ("vla.instructions", [], "vla.instructions"),
    ("vla.instructions", "reach the red target", "vla.instructions"),
    ("vla.instructions", [1, 2], "vla.instructions"),
    ("vla.instructions", ["", "touch the blue sphere"], "vla.instructions"),
    ("vla.instructions", ["   "], "vla.instructions"),
    ("vla.instructions", [None], "vla.instructions"),
    ("vla.instructions", ["reach the r\u00f8d target"], "vla.instructions[0]"),
    ("vla.tokenizer", "../tokenizer.json", "vla.tokenizer"),
    ("vla.tokenizer", "/etc/passwd", "vla.tokenizer"),
    ("vla.tokenizer", "..", "vla.tokenizer"),
    ("vla.tokenizer", "", "vla.tokenizer"),
    ("vla.tokenizer", 5, "vla.tokenizer"),
    ("vla.tokenizer", "other.json", "files"),
    ("vla.tokenizer", "policy.onnx", "vla.tokenizer"),
    ("vla.instruction_topic", "", "vla.instruction_topic"),
    ("vla.instruction_topic", 3, "vla.instruction_topic"),
    ("vla.image_format", "bgr8", "vla.image_format"),
    ("vla.state", "q - default", "vla.state"),
    ("vla.noise", "gaussian", "vla.noise"),
    ("vla", MISSING, "vla"),
    ("vla", "front", "vla"),
    ("vla.fps", 30, "vla.fps"),
    ("inputs", "images", "inputs"),
    ("inputs", MISSING, "vla"),
    ("inputs", "vector", "vla"),
    ("observation", [{"name": "joint_pos", "size": 6, "scale": 1.0}], "observation"),
]
"""(dotted key, bad value, key the message must name) of policy.yaml, resealed."""

GRAPH_VALUES = [
    ("vla.height", 48, "input 'image_front'"),
    ("vla.width", 16, "input 'image_front'"),
    ("vla.max_text_len", 16, "input 'tokens'"),
    ("vla.cameras", ["wrist", "front"], "inputs"),
    ("vla.cameras", ["left", "wrist"], "image_left"),
    ("chunk_length", 2, "input 'noise'"),
]
"""policy.yaml values valid on their own that the graph contradicts: the message names policy.onnx and the input."""


def cases() -> list[FuzzCase]:
    """The VLA artifact corpus."""
    out = [_value_case(dotted, value, key) for dotted, value, key in VALUES]
    out += [_case(f"{dotted}={value!r}_vs_graph", lambda a, d=dotted, v=value: _edit_yaml(
        a, lambda data: set_key(data, d, v) or _keep_execution(data)), ("policy.onnx", key))
        for dotted, value, key in GRAPH_VALUES]
    out += [
        _onnx_mismatch("float_images", {"image_dtype": "float32"}, "input 'image_front'"),
        _onnx_mismatch("int32_tokens", {"tokens_dtype": "int32"}, "input 'tokens'"),
        _onnx_mismatch("noise_flat", {"noise_shape": (24,)}, "input 'noise'"),
        _onnx_mismatch("noise_transposed", {"noise_shape": (6, 4)}, "input 'noise'"),
        _case("onnx_vector_graph", lambda a: _vector_graph(a), ("policy.onnx", "inputs")),
        _case("onnx_garbage", lambda a: (a / "policy.onnx").write_bytes(b"not onnx" * 20), ("policy.onnx", "ONNX")),
        _case("tokenizer_missing_resealed", lambda a: (a / "tokenizer.json").unlink(), ("policy.yaml", "files")),
        _case("tokenizer_missing", lambda a: (a / "tokenizer.json").unlink(), ("tokenizer.json", "missing"),
              sealed=False),
        _case("tokenizer_tampered", lambda a: (a / "tokenizer.json").write_text("{}"),
              ("tokenizer.json", "manifest.json"), sealed=False),
        _case("tokenizer_not_json", lambda a: (a / "tokenizer.json").write_text("{not json"),
              ("tokenizer.json", "tokenizers JSON")),
        _case("tokenizer_json_not_a_tokenizer", lambda a: (a / "tokenizer.json").write_text('{"vocab": [1, 2]}'),
              ("tokenizer.json", "tokenizers JSON")),
        _case("tokenizer_binary", lambda a: (a / "tokenizer.json").write_bytes(bytes(range(256)) * 4),
              ("tokenizer.json", "tokenizers JSON")),
        _case("tokenizer_wrong_specials", lambda a: _tokenizer_json(a, _swap_specials), ("tokenizer.json", "[PAD]")),
        _case("tokenizer_ids_beyond_the_embedding", _add_token_beyond_the_embedding, ("tokenizer.json", "ids")),
        _case("vector_artifact_with_vla_section", lambda a: None, ("policy.yaml", "vla"),
              source=lambda good: _vector_with(good, "vector")),
        _case("vector_artifact_claiming_vla", lambda a: None, ("policy.yaml", "observation"),
              source=lambda good: _vector_with(good, "vla")),
    ]
    return out


def _keep_execution(data: dict) -> None:
    """Keep chunk_execution valid when chunk_length is edited (so only the graph contradicts policy.yaml)."""
    data["chunk_execution"]["execute_len"] = min(data["chunk_execution"]["execute_len"], data["chunk_length"])


def _vector_graph(art: Path) -> None:
    """A vector policy's graph (``obs [B, D]``) in place of the VLA one (replace_onnx reads observation sizes)."""
    _edit_yaml(art, lambda d: d.update(observation=[{"name": "joint_pos", "size": 6, "scale": 1.0}]))
    replace_onnx(art, width=24)
    _edit_yaml(art, lambda d: d.update(observation=[]))


def _vector_with(good: GoodInputs, inputs: str) -> Path:
    """A copy of the vector artifact with the VLA artifact's ``vla`` section and ``inputs`` (built beside good)."""
    out = good.root / f"vector_with_vla_{inputs}"
    if not out.is_dir():
        shutil.copytree(good.artifact, out)
        vla = yaml.safe_load((good.vla_artifact() / "policy.yaml").read_text())["vla"]
        _edit_yaml(out, lambda d: d.update(inputs=inputs, vla=vla))
    return out
