"""Feature descriptions of a LeRobot v3.0 dataset and their parquet (Arrow) column types.

A feature is one named per-frame value: a numeric array (``dtype`` a numpy dtype name, ``shape``
a tuple), an ``image`` (PNG bytes stored inside the parquet), a ``video`` (frames stored in
per-camera mp4 files, not in the parquet) or a ``string``. Column types match what LeRobot 0.6.1
writes through Hugging Face ``datasets``:

- shape ``(1,)``            -> scalar column (``float``, ``bool``, ``int64`` ...)
- shape ``(N,)``, ``N > 0`` -> ``fixed_size_list<dtype>[N]``
- shape ``(0,)``            -> ``list<dtype>`` (variable length, always empty)
- 2-5 dims                  -> nested ``list<list<...>>`` (``datasets.Array2D`` ... ``Array5D`` storage)
- ``image``                 -> ``struct<bytes: binary, path: string>`` (``datasets.Image``)
- ``string``                -> ``string``
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from robot_rl.data.lerobot.errors import DatasetFormatError

NUMERIC_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
VISUAL_DTYPES = ("image", "video")
ALL_DTYPES = (*NUMERIC_DTYPES, *VISUAL_DTYPES, "string")

#: Columns every LeRobot dataset has, filled in by the writer (never by the caller).
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": (1,), "names": None},
    "frame_index": {"dtype": "int64", "shape": (1,), "names": None},
    "episode_index": {"dtype": "int64", "shape": (1,), "names": None},
    "index": {"dtype": "int64", "shape": (1,), "names": None},
    "task_index": {"dtype": "int64", "shape": (1,), "names": None},
}

_ARROW_SCALARS = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
}
_HF_ARRAY_TYPES = {2: "Array2D", 3: "Array3D", 4: "Array4D", 5: "Array5D"}
IMAGE_ARROW_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


@dataclass(frozen=True)
class Feature:
    """One feature of ``meta/info.json``: ``{"dtype", "shape", "names", "info"?}``.

    For ``image``/``video`` the shape is ``(height, width, channels)`` with names
    ``["height", "width", "channels"]``, as LeRobot writes it (the writer requires 3 RGB channels
    last; the reader also accepts other layouts, e.g. channels first, and decodes RGB frames).
    """

    dtype: str
    shape: tuple[int, ...]
    names: list[str] | dict[str, Any] | None = None
    info: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Reject dtypes and shapes LeRobot cannot store."""
        if self.dtype not in ALL_DTYPES:
            raise ValueError(f"feature dtype {self.dtype!r} is not supported; use one of {', '.join(ALL_DTYPES)}")
        if not all(isinstance(d, int) and d >= 0 for d in self.shape) or not self.shape:
            raise ValueError(f"feature shape {self.shape!r} must be a non-empty tuple of ints >= 0")
        if self.dtype in VISUAL_DTYPES and len(self.shape) != 3:
            raise ValueError(f"{self.dtype} shape {self.shape} must have 3 dims, e.g. (height, width, 3)")
        if self.dtype != "string" and len(self.shape) > 5:
            raise ValueError(f"feature shape {self.shape} has {len(self.shape)} dims; at most 5 are stored")

    @property
    def is_visual(self) -> bool:
        """True for ``image`` and ``video`` features."""
        return self.dtype in VISUAL_DTYPES

    @property
    def is_scalar(self) -> bool:
        """True when stored as a scalar column (numeric shape ``(1,)`` or a string)."""
        return self.dtype == "string" or (self.dtype in NUMERIC_DTYPES and self.shape == (1,))

    def to_json(self) -> dict[str, Any]:
        """The ``meta/info.json`` entry."""
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}
        if self.info is not None:
            out["info"] = self.info
        return out

    @classmethod
    def from_json(cls, key: str, entry: Any) -> Feature:
        """Parse one ``meta/info.json`` feature entry; ``key`` names it in errors."""
        if not isinstance(entry, dict) or "dtype" not in entry or "shape" not in entry:
            raise DatasetFormatError(
                f"feature {key!r} in meta/info.json must be an object with 'dtype' and 'shape', got {entry!r}"
            )
        shape = entry["shape"]
        if not isinstance(shape, list | tuple):
            raise DatasetFormatError(f"feature {key!r}: shape must be a list of ints, got {shape!r}")
        try:
            return cls(entry["dtype"], tuple(shape), entry.get("names"), entry.get("info"))
        except ValueError as err:
            raise DatasetFormatError(f"feature {key!r} in meta/info.json: {err}") from err


def default_features() -> dict[str, Feature]:
    """The five default columns as :class:`Feature` objects, in LeRobot's order."""
    return {k: Feature(v["dtype"], v["shape"], v["names"]) for k, v in DEFAULT_FEATURES.items()}


def arrow_type(feature: Feature) -> pa.DataType:
    """The parquet column type LeRobot stores ``feature`` as (videos have no column)."""
    if feature.dtype == "video":
        raise ValueError("video features have no parquet column; their frames live in mp4 files")
    if feature.dtype == "image":
        return IMAGE_ARROW_TYPE
    if feature.dtype == "string":
        return pa.string()
    scalar = _ARROW_SCALARS[feature.dtype]
    if feature.shape == (1,):
        return scalar
    if len(feature.shape) == 1:
        return pa.list_(scalar, feature.shape[0]) if feature.shape[0] > 0 else pa.list_(scalar)
    nested = scalar
    for _ in feature.shape:
        nested = pa.list_(nested)
    return nested


def hf_feature_json(feature: Feature) -> dict[str, Any]:
    """The Hugging Face ``datasets`` feature description stored in the parquet schema metadata."""
    if feature.dtype == "image":
        return {"_type": "Image"}
    if feature.dtype == "string" or feature.shape == (1,):
        return {"dtype": feature.dtype, "_type": "Value"}
    if len(feature.shape) == 1:
        length = feature.shape[0] if feature.shape[0] > 0 else -1
        return {"feature": {"dtype": feature.dtype, "_type": "Value"}, "length": length, "_type": "List"}
    return {
        "shape": list(feature.shape),
        "dtype": feature.dtype,
        "_type": _HF_ARRAY_TYPES[len(feature.shape)],
    }


def data_schema(features: dict[str, Feature]) -> pa.Schema:
    """Schema of the ``data/`` parquet files: every non-video feature, with ``huggingface`` metadata."""
    stored = {k: f for k, f in features.items() if f.dtype != "video"}
    hf = {"info": {"features": {k: hf_feature_json(f) for k, f in stored.items()}}}
    return pa.schema(
        [pa.field(k, arrow_type(f)) for k, f in stored.items()],
        metadata={"huggingface": json.dumps(hf)},
    )


def column_to_numpy(column: pa.ChunkedArray | pa.Array, feature: Feature) -> np.ndarray:
    """Convert one parquet column to numpy ``[num_frames, *shape]`` (scalars: ``[num_frames]``).

    Image and string columns come back as object arrays (PNG bytes / str).
    """
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(array)
    if feature.dtype == "image":
        return np.array([None if v is None else v["bytes"] for v in array.to_pylist()], dtype=object)
    if feature.dtype == "string":
        return np.array(array.to_pylist(), dtype=object)
    dtype = np.dtype(feature.dtype)
    if feature.shape == (1,) and not pa.types.is_list(array.type) and not pa.types.is_fixed_size_list(array.type):
        return array.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    values = array
    for _ in range(len(feature.shape)):
        if values.null_count:
            raise DatasetFormatError(f"column of shape {feature.shape} holds null rows; it is corrupt")
        values = values.flatten()
    flat = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    expected = n * int(np.prod(feature.shape))
    if flat.size != expected:
        raise DatasetFormatError(
            f"column holds {flat.size} values for {n} frames of shape {feature.shape} ({expected} expected)"
        )
    return flat.reshape(n, *feature.shape)


def numpy_to_column(values: np.ndarray | list[Any], feature: Feature) -> pa.Array:
    """Build the parquet column for ``values`` ``[num_frames, *shape]`` (image: list of PNG bytes)."""
    if feature.dtype == "image":
        return pa.array([{"bytes": b, "path": None} for b in values], type=IMAGE_ARROW_TYPE)
    if feature.dtype == "string":
        return pa.array(list(values), type=pa.string())
    array = np.asarray(values, dtype=np.dtype(feature.dtype))
    n = array.shape[0]
    if feature.shape == (1,):
        return pa.array(array.reshape(n), type=_ARROW_SCALARS[feature.dtype])
    flat: pa.Array = pa.array(array.reshape(-1), type=_ARROW_SCALARS[feature.dtype])
    if len(feature.shape) == 1:
        if feature.shape[0] == 0:
            return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), flat)
        return pa.FixedSizeListArray.from_arrays(flat, feature.shape[0])
    for size, count in zip(reversed(feature.shape), _outer_counts(n, feature.shape), strict=True):
        offsets = pa.array(np.arange(count + 1, dtype=np.int32) * size)
        flat = pa.ListArray.from_arrays(offsets, flat)
    return flat


def _outer_counts(n: int, shape: tuple[int, ...]) -> list[int]:
    """Number of lists at each nesting level, innermost first, for ``n`` frames of ``shape``."""
    counts = []
    for depth in range(len(shape) - 1, -1, -1):
        counts.append(n * int(np.prod(shape[:depth], dtype=np.int64)))
    return counts


def check_frame_value(key: str, feature: Feature, value: Any) -> np.ndarray | str:
    """Validate one value handed to the writer and return it in storage form.

    Numeric: an array of exactly ``feature.shape`` (a Python scalar is accepted for shape
    ``(1,)``), cast to ``feature.dtype`` only when the cast is lossless in kind (float -> float,
    int -> int/float, bool -> any). Visual: ``uint8 [H, W, 3]``. String: ``str``.
    """
    if feature.dtype == "string":
        if not isinstance(value, str):
            raise ValueError(f"feature {key!r} is a string; got {type(value).__name__}")
        return value
    array = np.asarray(value)
    if feature.is_visual:
        h, w, c = feature.shape
        if array.shape != (h, w, c) or array.dtype != np.uint8:
            raise ValueError(
                f"feature {key!r} expects uint8 frames of shape {(h, w, c)} (height, width, RGB); "
                f"got {array.dtype} {array.shape}. Render at the declared size or change the feature's shape."
            )
        return array
    if feature.shape == (1,) and array.shape == ():
        array = array.reshape(1)
    if array.shape != feature.shape:
        raise ValueError(f"feature {key!r} expects shape {feature.shape}; got {array.shape}")
    target = np.dtype(feature.dtype)
    if not np.can_cast(array.dtype, target, casting="same_kind"):
        raise ValueError(
            f"feature {key!r} is {feature.dtype}; got {array.dtype}, which does not cast safely. "
            f"Convert it (np.asarray(x, dtype='{feature.dtype}')) or declare the feature as {array.dtype}."
        )
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise ValueError(f"feature {key!r} holds NaN or inf: {array!r}; refusing to record it")
    return array.astype(target, copy=False)
