"""The VLA family: a SmolVLA/pi0-shaped flow-matching vision-language-action model (docs/vla.md).

- :mod:`~robot_rl.models.vla.tokenizer`: the instruction BPE (trained locally, saved as JSON);
- :mod:`~robot_rl.models.vla.flow`: flow-matching math in LeRobot's convention (pure functions);
- :mod:`~robot_rl.models.vla.encoders`: image encoders (conv from scratch, frozen EfficientNet-Lite0);
- :mod:`~robot_rl.models.vla.model`: :class:`VLAConfig` and :class:`VLA`.

Training batches from a LeRobot dataset: :class:`robot_rl.data.vla_batches.VLABatches`.
"""

from robot_rl.models.vla.model import VLA, Context, VLAConfig
from robot_rl.models.vla.tokenizer import InstructionTokenizer

__all__ = ["VLA", "Context", "InstructionTokenizer", "VLAConfig"]
