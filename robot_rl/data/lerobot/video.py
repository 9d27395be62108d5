"""Camera video I/O with PyAV, in the LeRobot v3.0 layout.

Each camera's frames go to ``videos/<key>/chunk-XXX/file-YYY.mp4``; one file holds several
episodes back to back, and the episodes parquet records where each starts and ends
(``from_timestamp`` / ``to_timestamp``, seconds). Recording encodes one episode into its own
temporary mp4 (frames stream to the encoder, so memory stays flat), then :func:`append_video`
remuxes it onto the end of the chunk file without re-encoding, into a temporary file that is
renamed over the old one: the chunk file on disk is always complete.

Defaults match LeRobot's: AV1 (SVT-AV1), yuv420p, keyframe every 2 frames, crf 30, preset 12.
SVT-AV1 switches the thread that opens an encoder to SCHED_FIFO 99 wherever it may (root, CAP_SYS_NICE)
and its ~40 worker threads inherit that; :func:`keep_scheduling` undoes it, so a recording process
(and every process it starts afterwards) keeps its own scheduling.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from robot_rl.data.lerobot.errors import DatasetFormatError

# SVT-AV1 prints a banner per encoder unless told otherwise (1 = errors only).
os.environ.setdefault("SVT_LOG", "1")

DEFAULT_TOLERANCE_S = 1e-4


def _scheduling(tid: int) -> tuple[int, int]:
    """(policy, priority) of thread ``tid`` (0: the calling thread)."""
    return os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority


@contextlib.contextmanager
def keep_scheduling() -> Iterator[None]:
    """Run the block, then put every thread of this process back at the scheduling it had before; threads the
    block started get the caller's. (For SVT-AV1's real-time switch; a no-op off Linux.)"""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    caller = _scheduling(0)
    before = {int(t): _scheduling(int(t)) for t in os.listdir("/proc/self/task")}
    try:
        yield
    finally:
        for tid in map(int, os.listdir("/proc/self/task")):
            want = before.get(tid, caller)
            try:
                if _scheduling(tid) != want:
                    os.sched_setscheduler(tid, want[0], os.sched_param(want[1]))
            except ProcessLookupError:  # the thread ended meanwhile
                continue


@dataclass(frozen=True)
class VideoSettings:
    """Encoder settings, recorded in the feature's ``info`` in ``meta/info.json``."""

    encoder: str = "libsvtav1"
    pix_fmt: str = "yuv420p"
    g: int = 2
    crf: int = 30
    preset: int = 12
    fast_decode: int = 0

    def options(self) -> dict[str, str]:
        """FFmpeg encoder options."""
        opts = {"g": str(self.g), "crf": str(self.crf)}
        if self.encoder == "libsvtav1":
            opts["preset"] = str(self.preset)
            if self.fast_decode:
                opts["svtav1-params"] = f"fast-decode={self.fast_decode}"
        elif self.encoder == "libx264":
            opts["preset"] = "ultrafast"
        return opts


class EpisodeVideoEncoder:
    """Streams uint8 ``[H, W, 3]`` RGB frames of one episode into an mp4 file."""

    def __init__(self, path: Path, width: int, height: int, fps: int, settings: VideoSettings) -> None:
        """Open the encoder; ``path``'s folder must exist."""
        if width % 2 or height % 2:
            raise ValueError(
                f"video frames must have even width and height for {settings.pix_fmt}; got {width}x{height}. "
                "Render at an even size (e.g. 64x64, 640x480)."
            )
        self.path = path
        self.fps = fps
        self.frames = 0
        self._container = av.open(str(path), mode="w", format="mp4")
        try:
            self._stream = self._container.add_stream(settings.encoder, rate=fps, options=settings.options())
        except (av.FFmpegError, ValueError) as err:
            self._container.close()
            raise ValueError(
                f"video encoder {settings.encoder!r} is unavailable in this PyAV build ({err}); "
                "use libsvtav1 or libx264"
            ) from err
        self._stream.width = width
        self._stream.height = height
        self._stream.pix_fmt = settings.pix_fmt
        self._stream.codec_context.time_base = Fraction(1, fps)
        with keep_scheduling():  # the encoder and its threads start here, not at the first frame
            self._stream.codec_context.open()

    def add(self, frame: np.ndarray) -> None:
        """Encode one frame ``uint8 [H, W, 3]``."""
        video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
        video_frame.pts = self.frames
        video_frame.time_base = Fraction(1, self.fps)
        for packet in self._stream.encode(video_frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> int:
        """Flush the encoder and finish the file; returns the number of frames written."""
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self.frames

    def abort(self) -> None:
        """Drop the file without finishing it."""
        self._container.close()
        self.path.unlink(missing_ok=True)


def append_video(target: Path | None, episode_file: Path, offset_s: float, out_path: Path) -> None:
    """Write ``target`` (unless None) followed by ``episode_file`` shifted by ``offset_s`` into ``out_path``.

    Packets are copied, not re-encoded. ``offset_s`` is the end time of ``target`` (the sum of its
    episodes' durations), which becomes the new episode's ``from_timestamp``.
    """
    sources = ([(target, 0.0)] if target is not None else []) + [(episode_file, offset_s)]
    with av.open(str(out_path), mode="w", format="mp4") as out:
        out_stream = None
        for path, shift_s in sources:
            with av.open(str(path)) as src:
                stream = src.streams.video[0]
                if out_stream is None:
                    out_stream = out.add_stream_from_template(stream, opaque=True)
                shift = round(shift_s / stream.time_base)
                for packet in src.demux(stream):
                    if packet.dts is None:
                        continue
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = out_stream
                    out.mux(packet)


def video_info(path: Path, fps: int, settings: VideoSettings) -> dict[str, Any]:
    """The ``info`` entry LeRobot stores for a video feature, read from a written file."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            "video.height": stream.codec_context.height,
            "video.width": stream.codec_context.width,
            "video.codec": stream.codec_context.codec.name if stream.codec_context.codec.name != "libdav1d" else "av1",
            "video.pix_fmt": stream.codec_context.pix_fmt,
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
            "video.g": settings.g,
            "video.crf": settings.crf,
            "video.preset": settings.preset,
            "video.fast_decode": settings.fast_decode,
            "video.video_backend": "pyav",
            "video.extra_options": {},
            "is_depth_map": False,
        }


def decode_frames(path: Path, timestamps: np.ndarray, tolerance_s: float = DEFAULT_TOLERANCE_S) -> np.ndarray:
    """Decode the frames shown at ``timestamps`` (seconds in the file) -> uint8 ``[N, H, W, 3]``.

    Seeks to the keyframe before the first timestamp and decodes forward; each requested time takes
    the decoded frame nearest to it, which must lie within ``tolerance_s`` (LeRobot's rule), or a
    :class:`DatasetFormatError` names the gap. Only matching frames are converted to RGB, so memory
    holds the output, not the whole decoded span.
    """
    wanted = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if wanted.size == 0:
        raise ValueError("decode_frames needs at least one timestamp")
    if not path.is_file():
        raise DatasetFormatError(f"video file {path} is missing; the dataset is incomplete")
    order = np.argsort(wanted, kind="stable")
    ordered = wanted[order]
    first, last = float(ordered[0]), float(ordered[-1])
    best = np.full(wanted.size, np.inf)
    out: np.ndarray | None = None
    times: list[float] = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DatasetFormatError(f"video file {path} holds no video stream; it is corrupt or truncated")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            container.seek(max(0, int(first / stream.time_base) - 1), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base)
                if t < first - tolerance_s:
                    continue
                times.append(t)
                lo = int(np.searchsorted(ordered, t - tolerance_s, side="left"))
                hi = int(np.searchsorted(ordered, t + tolerance_s, side="right"))
                hits = order[lo:hi]
                closer = hits[np.abs(wanted[hits] - t) < best[hits]]
                if closer.size:
                    rgb = frame.to_ndarray(format="rgb24")
                    if out is None:
                        out = np.empty((wanted.size, *rgb.shape), dtype=np.uint8)
                    out[closer] = rgb
                    best[closer] = np.abs(wanted[closer] - t)
                if t >= last + tolerance_s:
                    break
    except av.FFmpegError as err:
        raise DatasetFormatError(
            f"video file {path} cannot be decoded ({err}); it is corrupt or truncated. "
            "Restore it from a copy or re-record its episodes."
        ) from err
    if out is None or not np.isfinite(best).all():
        _raise_gap(path, np.asarray(times), wanted[~np.isfinite(best)], tolerance_s)
    return out


def _raise_gap(path: Path, times: np.ndarray, unmatched: np.ndarray, tolerance_s: float) -> None:
    """Explain which requested time found no decoded frame within the tolerance."""
    if times.size == 0:
        raise DatasetFormatError(
            f"{path} has no frame at or after t={unmatched.min():.4f}s; "
            "the episodes metadata points past the end of the video"
        )
    bad = float(unmatched[0])
    nearest = float(times[np.abs(times - bad).argmin()])
    raise DatasetFormatError(
        f"{path}: no frame within {tolerance_s}s of t={bad:.6f}s (nearest t={nearest:.6f}s). "
        "The video and the parquet timestamps disagree; the video was re-encoded at another rate or is "
        "truncated. Pass a larger tolerance_s only if you know the offset is harmless."
    )
