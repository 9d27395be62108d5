"""The instruction tokenizer of the VLA family: a byte-pair encoding trained locally with ``tokenizers``.

Text is lower-cased (NFKC) and split at spaces the SentencePiece way (``Metaspace``: each word starts with
``▁``), so ``decode(encode(text))`` gives back the normalised text exactly. The alphabet always holds
printable ASCII, so a word never seen in training still encodes (as smaller pieces, down to single
characters); only characters outside the alphabet become ``[UNK]``. Saved and loaded as the
``tokenizers`` JSON file, never pickle.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

import torch

from robot_rl.errors import InputError

try:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as exc:
    raise InputError("the VLA family (robot_rl.models.vla) needs the tokenizers package",
                     fix='pip install -e ".[vla]"') from exc

PAD, UNK = "[PAD]", "[UNK]"
"""Special tokens, ids 0 and 1."""
ALPHABET = sorted(set(string.printable) - set(string.whitespace))
"""Characters every trained tokenizer encodes without ``[UNK]``."""


class InstructionTokenizer:
    """A BPE over instructions: ``encode(texts, max_len) -> ids, mask``, ``decode(ids) -> text``."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        """Wrap a ``tokenizers.Tokenizer`` made by :meth:`train` or :meth:`load`."""
        if not has_specials(tokenizer):
            raise ValueError(f"tokenizer has {PAD}={tokenizer.token_to_id(PAD)}, {UNK}={tokenizer.token_to_id(UNK)}; "
                             "expected 0 and 1")
        self._tok = tokenizer
        self.pad_id, self.unk_id = 0, 1

    @classmethod
    def train(cls, texts: Sequence[str], vocab_size: int = 256) -> InstructionTokenizer:
        """Train a BPE of at most ``vocab_size`` tokens (specials + alphabet + merges) on ``texts``."""
        if vocab_size < len(ALPHABET) + 3:
            raise ValueError(f"vocab_size {vocab_size} is below the alphabet's {len(ALPHABET) + 3} tokens")
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, UNK],
                                      initial_alphabet=[*ALPHABET, "▁"], show_progress=False)
        tok.train_from_iterator(list(texts), trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        """Number of token ids (embedding rows the text encoder needs)."""
        return self._tok.get_vocab_size()

    def tokens(self, text: str) -> list[str]:
        """The pieces ``text`` splits into (for inspection)."""
        return self._tok.encode(text).tokens

    def encode(self, texts: Sequence[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids int64 ``[B, max_len]`` (right-padded with 0, cut at ``max_len``) and mask bool ``[B, max_len]``
        (True on real tokens)."""
        ids = torch.zeros(len(texts), max_len, dtype=torch.long)
        for row, enc in enumerate(self._tok.encode_batch(list(texts))):
            piece = enc.ids[:max_len]
            ids[row, : len(piece)] = torch.tensor(piece, dtype=torch.long)
        return ids, ids != self.pad_id

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Text of one row of ids ``[L]`` (padding dropped)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self._tok.decode([i for i in values if i != self.pad_id], skip_special_tokens=False)

    def to_json(self) -> str:
        """The tokenizer as ``tokenizers`` JSON text (what :meth:`save` writes; checkpoints hold it)."""
        return self._tok.to_str(pretty=True)

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as ``tokenizers`` JSON."""
        Path(path).write_text(self.to_json())

    @classmethod
    def from_json(cls, text: str, source: str | Path | None = None) -> InstructionTokenizer:
        """A tokenizer from :meth:`to_json`'s text (``source``: where it came from, for the error).

        Raises:
            InputError: not a tokenizer JSON of this family.
        """
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as exc:  # tokenizers raises a plain Exception on malformed JSON
            raise InputError(f"not a tokenizer JSON ({exc})", file=source,
                             fix="point at a file written by InstructionTokenizer.save") from exc
        if not has_specials(tokenizer):
            raise InputError(f"a tokenizer without {PAD} = 0 and {UNK} = 1", file=source,
                             fix="point at a file written by InstructionTokenizer.save")
        return cls(tokenizer)

    @classmethod
    def load(cls, path: str | Path) -> InstructionTokenizer:
        """Read a tokenizer JSON written by :meth:`save`.

        Raises:
            InputError: the file is missing or not a tokenizer of this family.
        """
        path = Path(path)
        if not path.is_file():
            raise InputError("tokenizer file not found", file=path, fix="train one with InstructionTokenizer.train")
        return cls.from_json(path.read_text(), path)


def has_specials(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` has this family's special tokens, ``[PAD]`` = 0 and ``[UNK]`` = 1."""
    return tokenizer.token_to_id(PAD) == 0 and tokenizer.token_to_id(UNK) == 1
