"""Instructions of a VLA artifact without torch: its ``tokenizers`` JSON, text -> token ids (numpy).

The same ids as :meth:`robot_rl.models.vla.tokenizer.InstructionTokenizer.encode` (the training side, torch):
``tokenizers`` encodes the text, the ids are cut at ``L`` and right-padded with ``0`` (``[PAD]``), the mask is
``ids != 0``. ``tokenizers`` (the ``[vla]`` extra) is imported only when a VLA artifact is opened, so vector
artifacts run on numpy + onnxruntime alone.

Rules for what a runtime accepts (docs/vla.md, "Export and ROS 2"):

- an empty (or all-whitespace) instruction is refused, and so is one over :data:`MAX_INSTRUCTION_CHARS` characters
  (not an instruction; its tokens past ``L`` would be cut anyway);
- a character the tokenizer maps to ``[UNK]`` (id 1: outside the trained alphabet, printable ASCII) is refused,
  since the model never saw that id;
- an instruction that is not one of the strings trained on is refused where the caller says so (the policy node,
  by default: a robot should not act on words it was never trained on) and otherwise accepted with a warning (the
  tokenizer splits any ASCII word into known pieces; paraphrases may work);
- an instruction longer than ``L`` tokens is cut at ``L`` (what training did), also a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.deploy.artifact import REEXPORT, ArtifactError
from robot_rl.errors import InputError

PAD_ID, UNK_ID = 0, 1
"""The VLA tokenizer's special ids, ``[PAD]`` and ``[UNK]``."""
MAX_INSTRUCTION_CHARS = 4096
"""Longest instruction a runtime encodes (characters); messages quote at most :data:`QUOTE_CHARS` of it."""
QUOTE_CHARS = 80


def quoted(text: str) -> str:
    """``repr(text)``, cut to :data:`QUOTE_CHARS` characters with its length when longer (for log lines)."""
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return f"{text[:QUOTE_CHARS]!r}... ({len(text)} characters)"


def load_tokenizer(path: Path) -> Any:
    """The ``tokenizers.Tokenizer`` of ``path``; ArtifactError when missing, malformed or without the specials."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ArtifactError("a VLA artifact needs the tokenizers package to encode its instruction", file=path,
                            fix='pip install -e ".[vla]" (or pip install tokenizers)') from exc
    if not path.is_file():
        raise ArtifactError("missing: the instruction tokenizer of this VLA artifact", file=path, fix=REEXPORT)
    try:
        tokenizer = Tokenizer.from_str(path.read_text())
    except Exception as exc:  # tokenizers raises a plain Exception on malformed JSON
        raise ArtifactError(f"not a tokenizers JSON ({str(exc)[:200]})", file=path, fix=REEXPORT) from exc
    if tokenizer.token_to_id("[PAD]") != PAD_ID or tokenizer.token_to_id("[UNK]") != UNK_ID:
        raise ArtifactError("a tokenizer without [PAD] = 0 and [UNK] = 1 (not the VLA family's)", file=path,
                            fix=REEXPORT)
    return tokenizer


def encode(tokenizer: Any, text: str, max_len: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ids int64 [L], mask bool [L], n)`` of one instruction; ``n`` is its token count before the cut at ``L``."""
    full = tokenizer.encode(text).ids
    ids = np.zeros(max_len, dtype=np.int64)
    piece = full[:max_len]
    ids[: len(piece)] = piece
    return ids, ids != PAD_ID, len(full)


def check_instruction(tokenizer: Any, text: str, max_len: int, known: Sequence[str],
                      allow_untrained: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(ids [L], mask [L], warnings)`` of ``text`` under the module's rules.

    Raises:
        InputError: ``text`` is not a string, is empty, longer than :data:`MAX_INSTRUCTION_CHARS`, holds
            characters the tokenizer maps to ``[UNK]``, or (``allow_untrained=False``) is none of ``known``.
    """
    fix = f"send one of the instructions the policy was trained on, e.g. {known[0]!r}"
    if not isinstance(text, str) or not text.strip():
        raise InputError("the instruction is empty", key="instruction", value=text, fix=fix)
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InputError(f"the instruction has {len(text)} characters, more than {MAX_INSTRUCTION_CHARS}",
                         key="instruction", value=quoted(text), fix=fix)
    ids, mask, count = encode(tokenizer, text, max_len)
    if UNK_ID in ids:
        unknown = sorted(c for c in set(text) if UNK_ID in tokenizer.encode(c).ids)
        raise InputError(f"the instruction holds characters the policy's tokenizer does not know ({unknown}: "
                         "[UNK])", key="instruction", value=quoted(text), fix="write the instruction in plain ASCII")
    warnings = []
    if text not in known:
        if not allow_untrained:
            raise InputError("the instruction is not one the policy was trained on", key="instruction",
                             value=quoted(text), fix=f"{fix} (policy.yaml vla.instructions); to run paraphrases, "
                                                     "set the policy node's run_untrained_instructions:=true")
        warnings.append(f"instruction {quoted(text)} is not one the policy was trained on (e.g. {known[0]!r}); "
                        "running it anyway")
    if count > max_len:
        warnings.append(f"instruction {quoted(text)} has {count} tokens, cut at {max_len}")
    return ids, mask, warnings
