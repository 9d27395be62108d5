"""Cut the tail of a chunk mp4 back to the last committed episode (crash recovery)."""

from __future__ import annotations

from pathlib import Path

import av

from robot_rl.data.lerobot.meta import atomic_path


def video_end_s(path: Path) -> float:
    """Presentation time (s) just after the last frame of ``path``'s video stream."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        end = 0.0
        for packet in container.demux(stream):
            if packet.pts is not None:
                end = max(end, float((packet.pts + (packet.duration or 0)) * stream.time_base))
        return end


def trim_video(path: Path, end_s: float, fps: int) -> bool:
    """Drop every frame at or after ``end_s`` (seconds) from ``path``, atomically; True if it changed.

    Packets are copied, not re-encoded; frames of the committed episodes keep their timestamps.
    """
    cutoff = end_s - 0.5 / fps
    if video_end_s(path) <= end_s + 0.5 / fps:
        return False
    with atomic_path(path) as tmp, av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4") as out:
        stream = src.streams.video[0]
        out_stream = out.add_stream_from_template(stream, opaque=True)
        for packet in src.demux(stream):
            if packet.dts is None or packet.pts is None or float(packet.pts * stream.time_base) >= cutoff:
                continue
            packet.stream = out_stream
            out.mux(packet)
    return True
