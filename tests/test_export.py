"""Contract 3 round trip: torch actor vs ONNX Runtime vs TorchScript, and the policy.yaml schema."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from robot_rl.deploy.artifact import ArtifactError, PolicyMeta, check_joint_order, load_meta
from robot_rl.export import PolicyHead, export_policy, make_meta

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex"]


def tiny_meta(chunk_length: int = 1):
    return make_meta(
        robot="toy",
        joint_names=JOINTS,
        default_joint_pos=[0.0, -1.0, 1.0],
        observation_layout=[("joint_pos", 3, 1.0), ("joint_vel", 3, 0.1), ("target_pos", 3, 1.0)],
        action_scale=[0.5, 0.25, 0.5],
        control_hz=25,
        chunk_length=chunk_length,
        task="toy_reach",
        training={"algorithm": "ppo", "steps": 10},
    )


def tiny_head(meta, seed: int = 0) -> PolicyHead:
    torch.manual_seed(seed)
    D, HA = meta.observation_dim, meta.chunk_length * meta.action_dim
    net = torch.nn.Sequential(torch.nn.Linear(D, 32), torch.nn.ELU(), torch.nn.Linear(32, HA))
    return PolicyHead(net, meta, obs_mean=torch.randn(D), obs_std=torch.rand(D) + 0.5)


@pytest.mark.parametrize("chunk_length", [1, 4])
def test_round_trip_torch_onnx_torchscript(tmp_path, chunk_length):
    meta = tiny_meta(chunk_length)
    head = tiny_head(meta)
    out = export_policy(head, meta, tmp_path / "policy")
    obs = torch.randn(17, meta.observation_dim) * 3
    with torch.no_grad():
        expected = head(obs).numpy()
    session = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    got_onnx = session.run(["action"], {"obs": obs.numpy()})[0]
    got_ts = torch.jit.load(str(out / "policy.pt"))(obs).detach().numpy()
    assert got_onnx.shape == (17, chunk_length * 3)
    np.testing.assert_allclose(got_onnx, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got_ts, expected, atol=1e-5, rtol=0)
    loaded = load_meta(out)
    assert loaded == dataclasses.replace(meta, files=loaded.files)
    assert set(loaded.files) == {"policy.onnx", "policy.pt"}


def test_policy_head_applies_clip_scale_offset_by_hand():
    meta = tiny_meta()
    net = torch.nn.Identity()
    meta_obs3 = dataclasses.replace(meta, observation=meta.observation[:1])  # D = A = 3
    head = PolicyHead(net, meta_obs3)
    got = head(torch.tensor([[0.5, -3.0, 2.0]]))
    # offset + scale * clip(a): [0 + 0.5*0.5, -1 + 0.25*(-1), 1 + 0.5*1]
    torch.testing.assert_close(got, torch.tensor([[0.25, -1.25, 1.5]]))


def test_tampered_artifact_is_refused(tmp_path):
    meta = tiny_meta()
    out = export_policy(tiny_head(meta), meta, tmp_path / "p", formats=("onnx",))
    (out / "policy.onnx").write_bytes((out / "policy.onnx").read_bytes() + b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        load_meta(out)


def test_bad_meta_and_shape_errors_name_the_value(tmp_path):
    meta = tiny_meta()
    with pytest.raises(ArtifactError, match="wrist_vel"):
        bad_terms = [*meta.observation[:2], type(meta.observation[0])("wrist_vel", 3)]
        dataclasses.replace(meta, observation=bad_terms).validate()
    wrong = torch.nn.Linear(meta.observation_dim, 5)
    with pytest.raises(ArtifactError, match=r"expected \[4, 3\]"):
        export_policy(wrong, meta, tmp_path / "bad")
    assert not (tmp_path / "bad" / "policy.yaml").exists()
    data = meta.to_dict()
    data["schema_version"] = 99
    with pytest.raises(ArtifactError, match=r"policy.yaml: schema_version = 99: not supported"):
        PolicyMeta.from_dict(yaml.safe_load(yaml.safe_dump(data)))


def test_joint_order_mismatch_is_refused():
    meta = tiny_meta()
    check_joint_order(meta, JOINTS)
    with pytest.raises(ArtifactError, match="first difference at index 1"):
        check_joint_order(meta, ["shoulder_pan", "elbow_flex", "shoulder_lift"])
    with pytest.raises(ArtifactError, match=r"missing on the robot: \['elbow_flex'\]"):
        check_joint_order(meta, ["shoulder_pan", "shoulder_lift", "wrist"])


def test_joint_position_action_maps_onto_joint_range():
    meta = make_meta("toy", ["a", "b"], [0.0, 0.5], [("joint_pos", 2, 1.0)], 0.5, 50,
                     action_type="joint_position", joint_lower=[-1.0, 0.0], joint_upper=[1.0, 2.0])
    assert meta.action.offset == [0.0, 1.0] and meta.action.scale == [1.0, 1.0]
    # sim: lower + (a + 1) / 2 * (upper - lower); a = [-1, 0.5] -> [-1, 1.5]
    got = PolicyHead(torch.nn.Identity(), meta)(torch.tensor([[-1.0, 0.5]]))
    torch.testing.assert_close(got, torch.tensor([[-1.0, 1.5]]))
    with pytest.raises(ValueError, match="joint_lower and joint_upper"):
        make_meta("toy", ["a"], [0.0], [("joint_pos", 1, 1.0)], 0.5, 50, action_type="joint_position")
