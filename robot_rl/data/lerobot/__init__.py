"""LeRobot v3.0 datasets: read and write them with pyarrow + PyAV, without installing LeRobot.

Layout (what LeRobot 0.6.1 writes and reads)::

    meta/info.json                       fps, features (dtype/shape/names), totals, path templates
    meta/stats.json                      per-feature min/max/mean/std/count/q01..q99 over the dataset
    meta/tasks.parquet                   task_index -> task string
    meta/episodes/chunk-XXX/file-YYY.parquet   one row per episode: length, index range, file
                                               locations, video spans, per-episode stats
    data/chunk-XXX/file-YYY.parquet      one row per frame, one row group per episode
    videos/<camera>/chunk-XXX/file-YYY.mp4     AV1 video, several episodes back to back

Use :class:`LeRobotWriter` to record and :class:`LeRobotDataset` to read.
"""

from robot_rl.data.lerobot.errors import DatasetFormatError
from robot_rl.data.lerobot.features import Feature
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.video import VideoSettings
from robot_rl.data.lerobot.writer import LeRobotWriter

__all__ = ["DatasetFormatError", "Feature", "LeRobotDataset", "LeRobotWriter", "VideoSettings"]
