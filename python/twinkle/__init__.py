"""twinkle — ModelScope Twinkle's Megatron-backend API over twinkle's C++ core.

The cookbook's recipes (cookbook/megatron/tp.py, ascend/tp_npu.py) run unchanged except for the
device type and the model id:

    import twinkle
    from twinkle import DeviceMesh, get_device_placement, get_logger
    from twinkle.dataloader import DataLoader
    from twinkle.dataset import Dataset, DatasetMeta
    from twinkle.model import MegatronModel
    from twinkle.preprocessor import SelfCognitionProcessor

launched with `twinkle-run --nproc_per_node=8 script.py` (or mpirun / srun; PYTHONPATH must
reach build/python, which twinkle-run sets). Keyword names and defaults follow Twinkle
(modelscope/twinkle: DeviceMesh, Dataset, Template, DataLoader, MegatronModel); the computation
is the C++ core's (twinkle/twinkle.h). Errors: a bad argument raises ValueError (TypeError for an unknown
keyword), every other failure of the core RuntimeError, both with the C++ message.
"""
import os as _os
import random as _random
import sys as _sys

# OpenMPI's components are shared objects that expect libmpi's symbols to be global: load the
# extension (which links libmpi) with RTLD_GLOBAL, as mpi4py does.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from . import _core  # noqa: E402
finally:
    _sys.setdlopenflags(_flags)

from .device_mesh import DeviceMesh  # noqa: E402
from .logger import get_logger  # noqa: E402
from .lora import LoraConfig  # noqa: E402
from .platform import Platform  # noqa: E402

__all__ = ['DeviceMesh', 'LoraConfig', 'Platform', 'initialize', 'get_logger', 'get_device_placement',
           'is_initialized', 'kernelize_model']
__version__ = '0.1.0'

_state = {'mode': None, 'mesh': None, 'seed': 42}


def initialize(mode='local', nproc_per_node=8, ncpu_proc_per_node=8, seed=42, full_determinism=False, groups=None,
               global_device_mesh=None, lazy_collect=True, name=None, notifier=None):
    """Twinkle's twinkle.initialize (src/twinkle/infra/__init__.py) for mode 'local'.

    Sets TWINKLE_SESSION_ID (default: the pid) and TWINKLE_NAME (when named), seeds Python's
    and numpy's RNGs with `seed`, keeps `global_device_mesh` (default: a 1-D dp mesh over the
    launcher's world size) and starts the C++ runtime (twinkle::initialize: MPI under a
    launcher). nproc_per_node, ncpu_proc_per_node, groups, lazy_collect and notifier only
    matter for Twinkle's Ray mode and are accepted for compatibility.
    Raises ValueError for a mode other than 'local' or a mesh that is not a DeviceMesh, and
    RuntimeError with the C++ message for device_type 'npu' / 'cuda' (no such backend in this
    build), a world size that does not match the mesh, or a second call.
    """
    if global_device_mesh is None:
        global_device_mesh = DeviceMesh.from_sizes(dp_size=max(1, _core.world_size()))
    if not isinstance(global_device_mesh, DeviceMesh):
        raise ValueError('initialize: global_device_mesh must be a twinkle.DeviceMesh, got '
                         f'{type(global_device_mesh).__name__}')
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f'initialize: seed must be an int >= 0, got {seed!r}')
    _core.initialize(mode, global_device_mesh._mesh, seed, bool(full_determinism))
    _os.environ.setdefault('TWINKLE_SESSION_ID', str(_os.getpid()))
    if name:
        _os.environ['TWINKLE_NAME'] = str(name)
    _random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    _state.update(mode=mode, mesh=global_device_mesh, seed=seed)
    get_logger()._reset_level()
    _abort_job_on_uncaught_exception()


def _abort_job_on_uncaught_exception():
    """Makes an uncaught exception on one rank end the whole job, as run_main does for C++
    programs (twinkle/dist/runtime.h): without it the interpreter exits through MPI_Finalize
    (the C++ runtime's atexit), which waits for the other ranks while they wait in a collective
    for this one, and the job hangs. The hook prints the traceback with the previous hook, then,
    when more than one rank runs, calls _core.abort_job (MPI_Abort). mpi4py's `python -m mpi4py`
    does the same. SystemExit does not pass through sys.excepthook: sys.exit(code) with a
    non-zero code on one rank of a job still waits in MPI_Finalize."""
    previous = _sys.excepthook
    if getattr(previous, '_twinkle_abort', False):
        return

    def hook(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if _core.is_initialized() and _core.world_size() > 1:
            _core.abort_job(1, f'uncaught Python exception {exc_type.__name__}: {exc}; aborting the job')

    hook._twinkle_abort = True
    _sys.excepthook = hook


def is_initialized():
    return _core.is_initialized()


def get_device_placement():
    """The device placement table of the global mesh (an 80-column box titled DEVICE
    PLACEMENT TOPOLOGY, starting with a newline as Twinkle's)."""
    return '\n' + _core.get_device_placement()


def _global_mesh():
    return _state['mesh']



def kernelize_model(model, mapping=None, **kwargs):
    """Twinkle's kernelize (twinkle.kernel.kernelize, src/twinkle/kernel/) over twinkle::kernelize_model:
    swaps the kernels a MegatronModel calls. mapping: {op: {device: implementation}} over the
    kernel registry (None or {} = the device's built-in fused bundle); entries for other devices
    are skipped. Returns the model (Twinkle returns the kernelized model); the ops that changed
    are logged. ValueError for an unknown op or implementation (the C++ text), TypeError for a
    model that is not a twinkle MegatronModel."""
    from .model import MegatronModel
    if kwargs:
        raise TypeError(f'kernelize_model() got unexpected keyword arguments {sorted(kwargs)}')
    if not isinstance(model, MegatronModel):
        raise TypeError(f'kernelize_model: expected a twinkle.model.MegatronModel, got {type(model).__name__}')
    if mapping is not None and not isinstance(mapping, dict):
        raise ValueError(f'kernelize_model: mapping must be a dict {{op: {{device: impl}}}}, got {type(mapping).__name__}')
    model._m.kernelize({str(op): {str(d): str(i) for d, i in dict(v).items()} for op, v in (mapping or {}).items()})
    return model
