"""robot_rl.config.registry.Registry: the class lookup agents and critics share."""

from dataclasses import dataclass

import pytest

from robot_rl.config.registry import Registry, config_class


@dataclass
class _ACfg:
    x: int = 1


@dataclass
class _BCfg:
    y: int = 2


def test_register_lookup_and_refusals():
    reg: Registry[type] = Registry("test_registry")

    @reg.register("a", _ACfg)
    class A:
        pass

    assert reg.keys() == ["a"] and reg.class_of(_ACfg()) is A and reg.key_of_class(A) == "a"
    assert config_class("test_registry", "a") is _ACfg
    assert reg.register("a", _ACfg)(A) is A  # the same class again is a no-op
    with pytest.raises(ValueError, match=r"test_registry key 'a' is already registered by A"):
        reg.register("a", _ACfg)(type("Other", (), {}))
    with pytest.raises(KeyError, match=r"_BCfg is not a registered test_registry config"):
        reg.class_of(_BCfg())
    with pytest.raises(KeyError, match=r"int is not a registered test_registry; known: \['a'\]"):
        reg.key_of_class(int)
