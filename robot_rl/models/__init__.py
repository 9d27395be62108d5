"""Network building blocks: MLPs, the Gaussian actor, the empirical observation normaliser."""

from robot_rl.models.actor import GaussianActor
from robot_rl.models.mlp import activation, mlp
from robot_rl.models.normalizer import EmpiricalNormalizer

__all__ = ["EmpiricalNormalizer", "GaussianActor", "activation", "mlp"]
