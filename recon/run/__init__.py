"""Layer 7: a finished or running run folder, for reading. May import layers 1-6 and rasterizer.

- ``folder.py``: :class:`Run`, the one way to open a run folder (config, scene, model, metrics, history);
- ``cameras.py``: a run's training cameras, or why they are not available;
- ``floaters.py``: floater removal (``export`` and ``train --remove-floaters``);
- ``export_psnr.py``: test PSNR of a run's model before and after an export;
- ``time_args.py``: the ``--time`` / ``--times`` flags of render, export and view.
"""
