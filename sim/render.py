"""Offscreen rendering of one env to RGB arrays and mp4 files.

Only rendering needs OpenGL: training, evaluation without video and export never load it. The GL
backend is chosen at the first render, not at import: ``MUJOCO_GL`` when the user set it (``egl``,
``osmesa``, ``glfw``); else the display's (glfw) when ``DISPLAY`` is set; else EGL when ``libegl1`` is
installed and loads (Mesa renders through it without a GPU, ~2x faster than OSMesa), else OSMesa when
``libosmesa6`` is. With none of them, rendering raises an error naming the Debian packages to
install, and nothing else is affected. A headless backend chosen here is taken to be software GL:
shadows and multisampling, ~8x the cost of a small frame there, are turned off.

The small-image settings (:func:`small_image_model`, :func:`small_image_scene`: no shadow map, no
multisampling, no shadows, reflections or skybox) are set here only; camera observations
(:class:`CameraGroup`) and the demo camera always use them. Camera observations also draw simplified meshes
(:func:`simplify_meshes`): the SO-101's 322k visual triangles made two 64x64 frames of so101_pick_lang cost ~105 ms
on one idle core with EGL on Mesa, ~25 ms simplified.
"""

from __future__ import annotations

import atexit
import copy
import ctypes.util
import hashlib
import os
from pathlib import Path

import mujoco
import numpy as np

from sim.errors import GLUnavailableError, SimInputError

_RENDERERS: dict[tuple[int, int, int], mujoco.Renderer] = {}
_HEADLESS_BACKENDS = (("egl", "EGL", "libegl1"), ("osmesa", "OSMesa", "libosmesa6"))
"""Headless GL backends in order of preference: (MUJOCO_GL value, library name, Debian package)."""
_backend: str | None = None
_software = False


def gl_backend() -> str:
    """The GL backend rendering uses in this process (chosen once; see the module docstring).

    Raises:
        GLUnavailableError: no display and no headless GL library that loads (absent, or present but
            broken); names the Debian packages to install.
    """
    global _backend, _software
    if _backend is not None:
        return _backend
    chosen = os.environ.get("MUJOCO_GL", "").lower().strip()
    if not chosen and os.environ.get("DISPLAY"):
        chosen = "glfw"
    if not chosen:
        found = [name for name, lib, _ in _HEADLESS_BACKENDS if _loads(lib)]
        if not found:
            raise _no_gl("this machine has no display and no headless GL library that loads")
        chosen = found[0]
        _use_headless(chosen)
        _software = True
    _backend = chosen
    return chosen


def _no_gl(why: str) -> GLUnavailableError:
    packages = " or ".join(f"`apt-get install {package}`" for _, _, package in _HEADLESS_BACKENDS)
    return GLUnavailableError(f"rendering needs OpenGL, and {why}. Fix: {packages} (Debian), or set MUJOCO_GL to a "
                              "backend you have. Training, evaluation without video and export do not need it")


def _loads(lib: str) -> bool:
    """Whether the shared library ``lib`` (``EGL``, ``OSMesa``) is installed and loads."""
    path = ctypes.util.find_library(lib)
    if path is None:
        return False
    try:
        ctypes.CDLL(path)
    except OSError:  # listed by the loader's cache but broken (truncated, wrong architecture, masked)
        return False
    return True


def _use_headless(name: str) -> None:
    """Point MuJoCo's renderer at the ``name`` GL context (mujoco chose glfw when imported without MUJOCO_GL)."""
    import importlib

    from mujoco.rendering.classic import gl_context

    os.environ.setdefault("PYOPENGL_PLATFORM", name)  # read when PyOpenGL is first imported, just below
    try:
        gl_context.GLContext = importlib.import_module(f"mujoco.{name}").GLContext
    except (ImportError, AttributeError, OSError) as exc:  # PyOpenGL fails several ways on a broken GL
        raise _no_gl(f"its {name} library does not work ({type(exc).__name__}: {exc})") from exc


def _software_gl() -> bool:
    """Software GL (OSMesa, or a headless backend picked here): shadows and multisampling are turned off."""
    return gl_backend() == "osmesa" or _software


def small_image_model(model: mujoco.MjModel) -> None:
    """Small-image settings of ``model``, set before a renderer opens: no shadow map, no multisampling."""
    model.vis.quality.shadowsize = 0
    model.vis.quality.offsamples = 0


SMALL_IMAGE_MESH_CELL_M = 0.001
"""Vertex-clustering cell (m) of the meshes camera observations draw: the SO-101's visual meshes hold 322k triangles,
~4x the cost of a 64x64 frame in software GL for detail far below a pixel (>= 3 mm at the cameras' distances); 1 mm
cells keep 15% of them (47k) and change a 64x64 frame by ~1 intensity level of 255 on average."""


def cluster_triangles(vert: np.ndarray, face: np.ndarray, cell: float) -> tuple[np.ndarray, np.ndarray]:
    """Vertex clustering of one triangle mesh: vertices ``vert [V, 3]`` in the same ``cell``-sized cube merge into the
    cluster's first vertex; the triangles of ``face [F, 3]`` that collapse (two corners in one cluster) or repeat
    another (same corners in any order) are dropped. Returns the kept triangles' rows of ``face`` ``[K]`` (in order)
    and their corners ``[K, 3]`` (indices into ``vert``, cluster representatives)."""
    cluster = np.floor(vert / cell).astype(np.int64)
    _, first, inverse = np.unique(cluster, axis=0, return_index=True, return_inverse=True)
    corners = first[inverse.ravel()][face]
    kept = (corners[:, 0] != corners[:, 1]) & (corners[:, 1] != corners[:, 2]) & (corners[:, 0] != corners[:, 2])
    _, unique = np.unique(np.sort(corners[kept], axis=1), axis=0, return_index=True)
    rows = np.flatnonzero(kept)[np.sort(unique)]
    return rows, corners[rows]


_CLUSTERED: dict[tuple[bytes, float], tuple[np.ndarray, np.ndarray]] = {}
""":func:`cluster_triangles` results by (digest of the mesh's vertices and faces, cell): every camera env of a
process clusters the same meshes (0.3-0.4 s a renderer for the SO-101 here), so only the first pays."""
_CLUSTERED_MAX = 256


def clustered_triangles(vert: np.ndarray, face: np.ndarray, cell: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cluster_triangles` of ``vert [V, 3]`` and ``face [F, 3]``, computed once per process for each mesh
    (keyed by the arrays' bytes, so an edited mesh is clustered afresh); the arrays returned are read-only."""
    digest = hashlib.blake2b(np.array([*vert.shape, *face.shape]).tobytes(), digest_size=16)
    digest.update(np.ascontiguousarray(vert).tobytes())
    digest.update(np.ascontiguousarray(face).tobytes())
    key = (digest.digest(), float(cell))
    if key not in _CLUSTERED:
        if len(_CLUSTERED) >= _CLUSTERED_MAX:
            _CLUSTERED.clear()
        rows, corners = cluster_triangles(vert, face, cell)
        rows.flags.writeable = corners.flags.writeable = False
        _CLUSTERED[key] = rows, corners
    return _CLUSTERED[key]


def simplify_meshes(model: mujoco.MjModel, cell: float) -> None:
    """Simplify every mesh of ``model`` in place for drawing (:func:`cluster_triangles` in the mesh's frame, ``cell``
    m): the kept triangles, with their normals and texture coordinates, are packed at the start of the mesh's face
    block and ``mesh_facenum`` shrinks; vertices stay. Only for a render copy of a model: its faces are no longer
    the mesh's.

    Raises:
        SimInputError: ``cell`` is not a finite number > 0.
    """
    if not (np.isfinite(cell) and cell > 0):
        raise SimInputError(f"mesh simplification cell {cell!r} must be a finite number of metres > 0")
    for i in range(model.nmesh):
        va, vn = model.mesh_vertadr[i], model.mesh_vertnum[i]
        fa, fn = model.mesh_faceadr[i], model.mesh_facenum[i]
        rows, corners = clustered_triangles(model.mesh_vert[va:va + vn], model.mesh_face[fa:fa + fn], cell)
        block = slice(fa, fa + len(rows))
        model.mesh_face[block] = corners
        model.mesh_facenormal[block] = model.mesh_facenormal[fa:fa + fn][rows]
        if model.mesh_facetexcoord.size:
            model.mesh_facetexcoord[block] = model.mesh_facetexcoord[fa:fa + fn][rows]
        model.mesh_facenum[i] = len(rows)


def small_image_scene(scene: mujoco.MjvScene) -> None:
    """Turn off shadows, reflections and the skybox of ``scene``; needed after every ``update_scene``."""
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX):
        scene.flags[flag] = 0


def open_renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    """A new ``mujoco.Renderer`` on the chosen GL backend (the caller closes it); grows the offscreen buffer.

    Raises:
        GLUnavailableError: no GL backend, or its context cannot be created (names the package to install).
    """
    backend = gl_backend()
    if model.vis.global_.offwidth < width or model.vis.global_.offheight < height:
        model.vis.global_.offwidth = max(width, model.vis.global_.offwidth)
        model.vis.global_.offheight = max(height, model.vis.global_.offheight)
    if _software_gl():
        small_image_model(model)
    try:
        return mujoco.Renderer(model, height=height, width=width)
    except Exception as exc:  # GL context creation raises several unrelated types
        raise GLUnavailableError(
            f"cannot create an OpenGL context (backend {backend!r}): {exc}. "
            "Fix: on a machine without a GPU, `apt-get install libegl1` (or libosmesa6) and leave MUJOCO_GL "
            "unset; with an NVIDIA GPU set MUJOCO_GL=egl") from exc


def _renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    key = (id(model), width, height)
    if key not in _RENDERERS:
        _RENDERERS[key] = open_renderer(model, width, height)
    return _RENDERERS[key]


def default_camera(model: mujoco.MjModel) -> mujoco.MjvCamera:
    """A free camera looking at the model's centre from the front-left, above."""
    camera = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, camera)
    camera.azimuth, camera.elevation = 135.0, -25.0
    return camera


def render_frame(model: mujoco.MjModel, data: mujoco.MjData, width: int = 320, height: int = 240,
                 camera: str | int | mujoco.MjvCamera = -1, track_body: str | None = None) -> np.ndarray:
    """``[height, width, 3]`` uint8 RGB image of ``data``.

    Args:
        camera: a model camera (name or id), ``-1`` for the default free camera, or an MjvCamera.
        track_body: with the free camera, keep this body (e.g. a humanoid's base) in view.
    """
    renderer = _renderer(model, width, height)
    if isinstance(camera, int) and camera < 0:
        camera = default_camera(model)
        if track_body is not None:
            camera.lookat[:] = data.body(track_body).xpos
            camera.distance = 3.0
    renderer.update_scene(data, camera=camera)
    if _software_gl():
        small_image_scene(renderer.scene)
    return renderer.render().copy()


class SimCamera:
    """Renders frames at a fixed size with one renderer of its own (small-image settings), for demos.

    Software rendering (OSMesa) of the SO-101 takes ~0.6 s a frame with shadows and ~0.2 s
    without, on one busy CPU core; demos turn them off.
    """

    TARGET_BODY = "target"
    """The mocap body that marks a task's target (the reach tasks' marker)."""

    def __init__(self, model: mujoco.MjModel, height: int, width: int) -> None:
        """Open a renderer for ``model``."""
        self.model = model
        self.renderer = open_renderer(model, width, height)
        self.camera = default_camera(model)

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """uint8 ``[H, W, 3]`` image of ``data``."""
        self.renderer.update_scene(data, camera=self.camera)
        small_image_scene(self.renderer.scene)
        return self.renderer.render().copy()

    def render_env(self, env, index: int) -> np.ndarray:
        """uint8 ``[H, W, 3]`` image of env ``index`` of a :class:`sim.env.TaskEnv`."""
        return self.render(env.mujoco_view(index)[1])

    def render_state(self, qpos: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        """uint8 ``[H, W, 3]`` image of a recorded ``qpos [nq]`` (kinematic playback), target marker at ``[3]``."""
        data = mujoco.MjData(self.model)
        data.qpos[:] = qpos
        if target is not None and self.model.nmocap:
            data.mocap_pos[int(self.model.body(self.TARGET_BODY).mocapid[0])] = target
        mujoco.mj_forward(self.model, data)
        return self.render(data)

    def close(self) -> None:
        """Free the GL context."""
        self.renderer.close()


def world_cameras(model: mujoco.MjModel) -> tuple[str, ...]:
    """Names of the model's cameras fixed in the world (on the world body, not tracking anything): those
    :func:`image_position` can project to without the state."""
    return tuple(model.camera(i).name for i in range(model.ncam)
                 if model.cam_bodyid[i] == 0 and model.cam_mode[i] == mujoco.mjtCamLight.mjCAMLIGHT_FIXED)


def image_position(model: mujoco.MjModel, camera: str, points: np.ndarray) -> np.ndarray:
    """Where world ``points [N, 3]`` appear in world camera ``camera``'s square image: ``[N, 2]`` (x to the right,
    y down) in [-1, 1] inside the frame, the convention of the VLA keypoints
    (:func:`robot_rl.models.vla.encoders.spatial_softmax`); NaN for points behind the camera.

    Raises:
        SimInputError: ``camera`` is not one of :func:`world_cameras`.
    """
    fixed = world_cameras(model)
    if camera not in fixed:
        raise SimInputError(f"camera {camera!r} is not a world-fixed camera of the model; those are {list(fixed)}")
    cam = model.camera(camera).id
    rotation = model.cam_mat0[cam].reshape(3, 3)  # columns: the camera's x (right), y (up), z (backwards)
    rel = (np.asarray(points, dtype=np.float64) - model.cam_pos0[cam]) @ rotation
    depth = -rel[:, 2]
    half = np.tan(np.deg2rad(model.cam_fovy[cam]) / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.stack([rel[:, 0] / depth / half, -rel[:, 1] / depth / half], axis=1)
    out[depth <= 0] = np.nan
    return out


class CameraGroup:
    """Images of a batch of envs from named model cameras, with the small-image settings and simplified meshes
    (:func:`simplify_meshes`, :data:`SMALL_IMAGE_MESH_CELL_M`).

    Holds its own copy of the model (the settings do not touch the env's) and one renderer. An env is
    drawn from its positions alone (``qpos``, mocap poses, forward kinematics): per-env randomised
    model fields (masses, friction, gains) do not show in a picture.

    Args:
        model: the env's compiled model; it must define every camera in ``cameras``.
        cameras: MJCF camera names.
        height, width: image size in pixels.

    Raises:
        SimInputError: a camera the model does not define (the message lists those it does).
        GLUnavailableError: no GL backend (see :func:`gl_backend`).
    """

    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], height: int, width: int) -> None:
        known = [model.camera(i).name for i in range(model.ncam)]
        missing = [name for name in cameras if name not in known]
        if missing:
            raise SimInputError(f"camera {missing[0]!r} is not in the task's model; its cameras: {known}")
        self.cameras = tuple(cameras)
        self.model = copy.deepcopy(model)
        small_image_model(self.model)
        simplify_meshes(self.model, SMALL_IMAGE_MESH_CELL_M)
        self.data = mujoco.MjData(self.model)
        self.height, self.width = height, width
        self.renderer = open_renderer(self.model, width, height)

    def render(self, qpos: np.ndarray, mocap_pos: np.ndarray, mocap_quat: np.ndarray) -> dict[str, np.ndarray]:
        """``{camera: uint8 [n, 3, H, W]}`` of ``n`` envs given ``qpos [n, nq]``, ``mocap_pos [n, nmocap, 3]``
        and ``mocap_quat [n, nmocap, 4]``."""
        n = len(qpos)
        out = {name: np.empty((n, 3, self.height, self.width), dtype=np.uint8) for name in self.cameras}
        data = self.data
        for i in range(n):
            data.qpos[:] = qpos[i]
            data.mocap_pos[:] = mocap_pos[i]
            data.mocap_quat[:] = mocap_quat[i]
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_camlight(self.model, data)
            for name in self.cameras:
                self.renderer.update_scene(data, camera=name)
                small_image_scene(self.renderer.scene)
                out[name][i] = self.renderer.render().transpose(2, 0, 1)
        return out

    def close(self) -> None:
        """Free the GL context."""
        self.renderer.close()


@atexit.register
def close_renderers() -> None:
    """Free every cached renderer's GL context (also at interpreter exit, while GL still loads)."""
    for renderer in _RENDERERS.values():
        renderer.close()
    _RENDERERS.clear()


def write_mp4(frames: list[np.ndarray] | np.ndarray, path: str | Path, fps: float) -> Path:
    """Encode ``frames`` (each ``[H, W, 3]`` uint8) as an H.264 mp4 at ``fps``; returns the path."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not frames:
        raise ValueError(f"no frames to write to {path}")
    height, width = frames[0].shape[:2]
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=round(fps))
        stream.width, stream.height = width - width % 2, height - height % 2
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            image = av.VideoFrame.from_ndarray(frame[: stream.height, : stream.width], format="rgb24")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    tmp.replace(path)
    return path
