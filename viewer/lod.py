"""``splatforge view DIR`` on an LOD export (``splatforge export RUN --format lod``, docs/lod.md): chunks streamed
by distance and budget.

:func:`select_chunks` is the cut of the export's chunk tree for a camera (the chunk-level twin of
:func:`recon.lod.cut.select_cut`): it starts from the coarsest level's chunks and replaces the chunk of largest
projected error (``focal * error / distance to its box``, pixels; 0 outside the view) by its children (the
next finer level, the same Gaussians' finer version) while that error is above ``pixels`` and the Gaussians
drawn stay within the budget. :class:`LodScene` is a :class:`viewer.splat_scene.SplatScene` whose ``splats``
are the chunks of the current selection, read on first use and kept in an LRU cache of
:data:`CACHE_FACTOR` x budget Gaussians. :func:`attach_lod` adds the "Levels of detail" panel (Gaussians and
chunks drawn per level, the budget, the error threshold, the level-colour toggle) and follows each browser's
camera: a worker thread re-selects for the newest camera and re-sends the splats when the selection changed.
"""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from recon.core.splat_data import SplatData, rgb_to_dc
from recon.lod.export_lod import LodExport
from recon.lod.manifest import LodManifest, LodManifestError
from viewer.errors import ViewerInputError
from viewer.splat_scene import BrowserSplats, SplatScene, browser_splats

DEFAULT_PIXELS = 2.0  # a chunk is refined while its error projects to more than this many pixels
CACHE_FACTOR = 2.0  # chunks kept in memory: up to this many times the view budget in Gaussians
FIRST_VIEW_GAUSSIANS = 200_000  # the first view shows the finest level of at most this many Gaussians
NEAR = 0.01
LEVEL_COLOURS = np.array([  # level 0 (the model) first; levels past the list reuse its colours
    [0.90, 0.10, 0.10], [1.00, 0.55, 0.00], [0.95, 0.85, 0.10], [0.30, 0.80, 0.20], [0.10, 0.75, 0.80],
    [0.20, 0.35, 0.95], [0.60, 0.25, 0.85], [0.85, 0.30, 0.65]])


def chunk_error_pixels(manifest: LodManifest, camera_center: np.ndarray, world_to_cam: np.ndarray,
                       focal: float) -> np.ndarray:
    """[C] projected error of each chunk in pixels: ``focal * error / max(distance to its box, near)``; 0 for
    a box entirely behind the camera."""
    lo = np.array([c.bounds.min for c in manifest.chunks])
    hi = np.array([c.bounds.max for c in manifest.chunks])
    err = np.array([c.error for c in manifest.chunks])
    dist = np.linalg.norm(np.maximum(np.maximum(lo - camera_center, camera_center - hi), 0.0), axis=1)
    corners = np.stack([np.where(np.array(bits, bool), hi, lo) for bits in np.ndindex(2, 2, 2)], axis=1)
    z = corners @ world_to_cam[2, :3] + world_to_cam[2, 3]
    behind = (z < NEAR).all(axis=1)
    return np.where(behind, 0.0, focal * err / np.maximum(dist, NEAR))


def select_chunks(manifest: LodManifest, camera, budget: int, pixels: float = DEFAULT_PIXELS) -> list[int]:
    """Chunk indices to draw for ``camera`` (a :class:`rasterizer.camera.Camera`): the coarsest level's chunks,
    refined largest projected error first while it exceeds ``pixels`` and the Gaussians stay <= ``budget``."""
    w2c = camera.world_to_cam_numpy()
    center = -w2c[:3, :3].T @ w2c[:3, 3]
    K = camera.K_numpy()
    err = chunk_error_pixels(manifest, center, w2c, float(max(K[0, 0], K[1, 1])))
    children = manifest.children()
    top = manifest.chunks_of_level(len(manifest.levels) - 1)
    heap = [(-err[i], i) for i in top]
    heapq.heapify(heap)
    count = sum(manifest.chunks[i].count for i in top)
    chosen = []
    while heap:
        neg, i = heapq.heappop(heap)
        kids = children[i]
        extra = sum(manifest.chunks[k].count for k in kids) - manifest.chunks[i].count
        if not kids or -neg <= pixels or count + extra > budget:
            chosen.append(i)
            continue
        count += extra
        for k in kids:
            heapq.heappush(heap, (-err[k], k))
    return sorted(chosen)


class LodScene(SplatScene):
    """An LOD export as a viewer scene: ``splats`` are the selected chunks' Gaussians (see the module doc)."""

    streams = True

    def __init__(self, folder: Path):
        self.lod = LodExport(folder)
        m = self.lod.manifest
        self.budget = int(m.view_budget)
        self.pixels = DEFAULT_PIXELS
        self.colour_levels = False
        self._cache: OrderedDict[int, SplatData] = OrderedDict()
        self._lock = threading.Lock()
        first = next((lv.level for lv in m.levels if lv.count <= FIRST_VIEW_GAUSSIANS), len(m.levels) - 1)
        self.selection = m.chunks_of_level(first)
        super().__init__(splats=self._assemble(self.selection), source=Path(folder))

    # --------------------------------------------------------------------------------- streaming

    def chunk(self, index: int) -> SplatData:
        """Chunk ``index``'s Gaussians, from the cache or read now (LRU beyond CACHE_FACTOR x budget)."""
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        data = self.lod.read_chunk(index)
        self._cache[index] = data
        limit = CACHE_FACTOR * self.budget
        while sum(len(d) for d in self._cache.values()) > limit and len(self._cache) > 1:
            self._cache.popitem(last=False)
        return data

    def _assemble(self, selection: list[int]) -> SplatData:
        parts = [self.chunk(i) for i in selection]
        return SplatData(*(np.concatenate([getattr(p, f) for p in parts])
                           for f in ("means", "quats", "log_scales", "logit_opacities", "sh")),
                         antialiased=self.lod.manifest.antialiased)

    def levels_of(self, selection: list[int]) -> np.ndarray:
        """[N] level of each Gaussian of ``selection`` (in ``splats`` order)."""
        chunks = self.lod.manifest.chunks
        return np.concatenate([np.full(chunks[i].count, chunks[i].level) for i in selection])

    def update_camera(self, camera) -> bool:
        """Select the chunks for ``camera``; True when the selection (and so ``splats``) changed."""
        with self._lock:
            selection = select_chunks(self.lod.manifest, camera, self.budget, self.pixels)
            if selection == self.selection:
                return False
            self.splats = self._assemble(selection)
            self.selection = selection
            return True

    # ------------------------------------------------------------------------------ scene interface

    def total(self) -> int:
        return self.lod.manifest.leaves

    def browser(self, scale_factor: float = 1.0, min_opacity: float = 0.0, crop=None) -> BrowserSplats:
        with self._lock:  # the streaming thread replaces both together
            data, selection = self.splats, self.selection
        if self.colour_levels:
            data = data.with_sh_degree(0)
            data.sh[:, 0] = rgb_to_dc(LEVEL_COLOURS[self.levels_of(selection) % len(LEVEL_COLOURS)])
        return browser_splats(data, scale_factor, min_opacity, crop)

    def drawn_text(self) -> str:
        """"N Gaussians in C chunks (L0 a, L1 b, ...)": the HUD line."""
        chunks = self.lod.manifest.chunks
        per = {}
        for i in self.selection:
            per[chunks[i].level] = per.get(chunks[i].level, 0) + chunks[i].count
        levels = ", ".join(f"L{lv} {n:,}" for lv, n in sorted(per.items()))
        return f"{len(self.splats):,} Gaussians, {len(self.selection)} chunks ({levels})"

    def facts(self) -> dict[str, str]:
        m = self.lod.manifest
        return {"LOD export": str(self.source), "model Gaussians": f"{m.leaves:,}", "levels": str(len(m.levels)),
                "chunks": str(len(m.chunks)), "SH degree": str(m.sh_degree)}


def load_lod_scene(folder: Path) -> LodScene:
    """The :class:`LodScene` of an LOD export; :class:`viewer.errors.ViewerInputError` for a damaged one (its
    manifest, or any chunk file missing or of another size than listed)."""
    try:
        scene = LodScene(folder)
        scene.lod.check_files()  # every chunk there, of the listed size: fail now, not mid-flight
        return scene
    except LodManifestError as err:
        raise ViewerInputError(str(err)) from None


def attach_lod(viewer) -> None:
    """The "Levels of detail" panel and camera following of a :class:`viewer.server.ViewerServer` showing a
    :class:`LodScene`."""
    scene: LodScene = viewer.scene
    gui = viewer.server.gui
    latest: dict = {}
    wake = threading.Event()
    with gui.add_folder("Levels of detail"):
        drawn = gui.add_text("drawn", initial_value=scene.drawn_text(), disabled=True,
                             hint="Gaussians and chunks drawn now, per level (L0: the model's own Gaussians)")
        budget = gui.add_number("budget", initial_value=scene.budget, min=1, step=1000,
                                hint="most Gaussians drawn at once (the export's view budget)")
        pixels = gui.add_slider("error px", min=0.25, max=16.0, step=0.25, initial_value=scene.pixels,
                                hint="a chunk is replaced by finer ones while its error projects above this")
        colour = gui.add_checkbox("colour by level", initial_value=False,
                                  hint="draw each Gaussian in its level's colour (L0 red, L1 orange, ...)")
    viewer.gui.update(lod_drawn=drawn, lod_budget=budget, lod_pixels=pixels, lod_colour=colour)

    def request(client) -> None:
        latest["camera"] = viewer.client_frame(client, 640, 360)
        wake.set()

    def settings_changed(_event=None) -> None:
        scene.budget, scene.pixels = int(budget.value), float(pixels.value)
        wake.set()

    def colour_changed(_event=None) -> None:
        scene.colour_levels = bool(colour.value)
        viewer.refresh_splats()

    def loop() -> None:
        while viewer.server is not None:
            if not wake.wait(0.5):
                continue
            wake.clear()
            camera = latest.get("camera")
            if camera is None:
                continue
            try:
                changed = scene.update_camera(camera)
            except LodManifestError as err:  # a chunk went missing while viewing: say so, keep serving
                drawn.value = f"error: {err}"
                continue
            if changed:
                viewer.refresh_splats()
            drawn.value = scene.drawn_text()

    budget.on_update(settings_changed)
    pixels.on_update(settings_changed)
    colour.on_update(colour_changed)
    viewer.server.on_client_connect(lambda client: (client.camera.on_update(lambda _c: request(client)),
                                                    request(client)))
    for client in viewer.server.get_clients().values():
        client.camera.on_update(lambda _c, client=client: request(client))
    threading.Thread(target=loop, name="splatforge-lod", daemon=True).start()
