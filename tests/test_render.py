"""Offscreen rendering produces non-blank frames and a playable mp4; only rendering needs GL."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import av
import numpy as np
import pytest
import torch

import sim
from sim.render import write_mp4


@pytest.mark.render
def test_render_frames_are_not_blank_and_differ_between_envs(tmp_path):
    env = sim.make_env("so101_reach", num_envs=2, seed=0)
    env.reset(seed=0)
    env.step(torch.ones(2, env.action_dim) * torch.tensor([[0.5], [-0.5]]))
    frames = [env.render(i, width=96, height=64) for i in range(2)]
    for frame in frames:
        assert frame.shape == (64, 96, 3) and frame.dtype == np.uint8
        assert frame.std() > 5.0  # not a blank/uniform image
    assert np.abs(frames[0].astype(int) - frames[1].astype(int)).mean() > 0.5
    path = write_mp4(frames * 5, tmp_path / "clip.mp4", fps=25)
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(decoded) == 10 and decoded[0].shape == (64, 96, 3)
    env.close()


_NO_GL = """
import ast, ctypes.util, os, sys
FOUND = ast.literal_eval(sys.argv[1])
ctypes.util.find_library = lambda name: FOUND      # None: no libegl1/libosmesa6; a path: present, broken
import torch, sim
env = sim.make_env("so101_reach", num_envs=4, seed=0)
env.reset(seed=0)
step = env.step(torch.zeros(4, env.action_dim))
assert torch.isfinite(step.reward).all()
assert "OpenGL" not in sys.modules, "stepping the simulator loaded PyOpenGL"
assert "MUJOCO_GL" not in os.environ, os.environ.get("MUJOCO_GL")
try:
    env.render(0)
except RuntimeError as exc:
    print(exc)
    sys.exit(0)
sys.exit("rendering without any GL library did not raise")
"""


@pytest.mark.parametrize("found", [None, "/dev/null"], ids=["absent", "present-but-broken"])
def test_without_any_gl_library_sim_runs_and_only_rendering_fails_naming_the_packages(found):
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    done = subprocess.run([sys.executable, "-c", _NO_GL, repr(found)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "apt-get install libegl1" in done.stdout and "apt-get install libosmesa6" in done.stdout, done.stdout


def test_cluster_triangles_merges_vertices_per_cell_and_drops_collapsed_and_repeated_triangles():
    from sim.render import cluster_triangles

    # a strip along x: columns at x = 0, 0.1, 0.2, 0.3 of two vertices (y = 0 and 0.05), two triangles per gap
    vert = np.array([[x, y, 0.0] for x in (0.0, 0.1, 0.2, 0.3) for y in (0.0, 0.05)])
    face = np.array([[0, 2, 1], [1, 2, 3], [2, 4, 3], [3, 4, 5], [4, 6, 5], [5, 6, 7]])
    rows, corners = cluster_triangles(vert, face, 0.01)  # every vertex its own cell: nothing changes
    assert rows.tolist() == [0, 1, 2, 3, 4, 5] and (corners == face).all()
    # 0.15 m cells: x // 0.15 = 0, 0, 1, 2 and both rows in y cell 0: vertices 0-3 -> 0, 4-5 -> 4, 6-7 -> 6
    rows, corners = cluster_triangles(vert, face, 0.15)
    assert rows.tolist() == [] and corners.shape == (0, 3)  # every triangle has two corners in one cluster
    # 0.06 m cells: x // 0.06 = 0, 1, 3, 5 (columns apart); y // 0.06 = 0 for both rows: 2k and 2k+1 merge
    rows, corners = cluster_triangles(vert, face, 0.06)
    assert rows.tolist() == []
    # rows apart (y // 0.11 = 0, 1), columns 0 and 1 merged (x // 0.11 = 0, 0, 1, 2): the first gap collapses
    vert2 = vert * np.array([1.0, 4.0, 1.0])  # rows 0.2 m apart: y // 0.11 = 0 and 1
    rows, corners = cluster_triangles(vert2, face, 0.11)
    assert rows.tolist() == [2, 3, 4, 5]
    assert corners[:2].tolist() == [[0, 4, 1], [1, 4, 5]]  # vertex 2 -> 0, 3 -> 1 (their cluster's first)
    # a repeated triangle (same corners, other order) is kept once, the first
    rows, _ = cluster_triangles(vert, np.vstack([face, [[1, 0, 2]]]), 0.01)
    assert rows.tolist() == [0, 1, 2, 3, 4, 5]


def test_clustered_triangles_are_computed_once_per_mesh_and_cell():
    """The per-process cache returns cluster_triangles' answer, the same arrays (read-only) for the same mesh and
    cell, and a fresh answer for another cell or an edited mesh."""
    from sim.render import cluster_triangles, clustered_triangles

    vert = np.array([[x, y, 0.0] for x in (0.0, 0.1, 0.2, 0.3) for y in (0.0, 0.2)])
    face = np.array([[0, 2, 1], [1, 2, 3], [2, 4, 3], [3, 4, 5], [4, 6, 5], [5, 6, 7]])
    rows, corners = clustered_triangles(vert, face, 0.11)
    expected = cluster_triangles(vert, face, 0.11)
    assert rows.tolist() == expected[0].tolist() == [2, 3, 4, 5] and (corners == expected[1]).all()
    again = clustered_triangles(vert.copy(), face.copy(), 0.11)
    assert again[0] is rows and again[1] is corners and not rows.flags.writeable
    assert clustered_triangles(vert, face, 0.01)[0].tolist() == [0, 1, 2, 3, 4, 5]  # another cell
    moved = vert.copy()
    moved[2, 0] = 0.5  # vertex 2 leaves vertex 0's cell: the first gap no longer collapses
    assert clustered_triangles(moved, face, 0.11)[0].tolist() == cluster_triangles(moved, face, 0.11)[0].tolist()
    assert clustered_triangles(moved, face, 0.11)[0].tolist() != rows.tolist()


def test_simplify_meshes_packs_the_kept_faces_of_each_mesh_and_refuses_a_bad_cell():
    from sim.errors import SimInputError
    from sim.render import cluster_triangles, simplify_meshes

    model = sim.make_env("so101_reach", num_envs=1).mujoco_view(0)[0]
    simplified = copy.deepcopy(model)
    simplify_meshes(simplified, 0.002)
    for i in range(model.nmesh):
        fa, fn, va, vn = model.mesh_faceadr[i], model.mesh_facenum[i], model.mesh_vertadr[i], model.mesh_vertnum[i]
        rows, corners = cluster_triangles(model.mesh_vert[va:va + vn], model.mesh_face[fa:fa + fn], 0.002)
        k = simplified.mesh_facenum[i]
        assert k == len(rows) and 0 < k < fn
        assert (simplified.mesh_face[fa:fa + k] == corners).all()
        assert (simplified.mesh_facenormal[fa:fa + k] == model.mesh_facenormal[fa:fa + fn][rows]).all()
    assert (simplified.mesh_vert == model.mesh_vert).all()
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SimInputError, match="cell"):
            simplify_meshes(simplified, bad)


@pytest.mark.render
def test_camera_groups_draw_simplified_meshes_close_to_the_full_ones():
    import mujoco

    from sim import render

    env = sim.make_env("so101_pick_lang", num_envs=1, seed=0)
    env.reset(seed=0)
    model, data = env.mujoco_view(0)
    state = (data.qpos[None].copy(), data.mocap_pos[None].copy(), data.mocap_quat[None].copy())
    group = render.CameraGroup(model, ("front", "wrist"), 64, 64)
    assert group.model.mesh_facenum.sum() < 0.25 * model.mesh_facenum.sum()  # 322k -> 47k on the SO-101
    assert (model.mesh_facenum == env.mujoco_view(0)[0].mesh_facenum).all()  # the env's model untouched
    simplified = group.render(*state)
    group.close()
    full_model = copy.deepcopy(model)
    render.small_image_model(full_model)
    full = mujoco.Renderer(full_model, 64, 64)
    scratch = mujoco.MjData(full_model)
    scratch.qpos[:], scratch.mocap_pos[:], scratch.mocap_quat[:] = (x[0] for x in state)
    mujoco.mj_forward(full_model, scratch)
    for camera in ("front", "wrist"):
        full.update_scene(scratch, camera=camera)
        render.small_image_scene(full.scene)
        reference = full.render().transpose(2, 0, 1).astype(int)
        diff = np.abs(simplified[camera][0].astype(int) - reference)
        assert diff.mean() < 3.0, (camera, diff.mean())  # ~1 level of 255 measured
        assert (diff.max(axis=0) > 60).mean() < 0.05, camera  # few pixels change much (edges)
    full.close()
