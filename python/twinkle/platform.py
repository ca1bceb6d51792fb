"""twinkle.Platform: the rank / device queries the cookbook's recipes use (Twinkle's
src/twinkle/utils/platforms/base.py). This build has the CPU backend only."""
from . import _core


class Platform:

    @staticmethod
    def get_rank():
        """Global rank (MPI once initialised, else the launcher's environment, else 0)."""
        return _core.world_rank()

    @staticmethod
    def get_world_size():
        return _core.world_size()

    @staticmethod
    def get_local_rank():
        return _core.local_rank()

    @staticmethod
    def device_prefix():
        """'cpu': the only backend this build has (Twinkle: 'npu' when npu-smi is on PATH)."""
        return 'cpu'

    @staticmethod
    def is_last_rank():
        return _core.world_rank() == _core.world_size() - 1
