"""twinkle.DeviceMesh (Twinkle's src/twinkle/utils/device_mesh.py) over twinkle::DeviceMesh.

Layout: Megatron's order 'tp-cp-ep-dp-pp' (tp fastest, pp slowest) — Twinkle's
arange(world).reshape(pp, dp, cp, tp) gives the same coordinates. EP / ETP are not mesh
dimensions (the expert grid re-splits the same ranks)."""
from . import _core

_UNSUPPORTED = ('fsdp_size', 'ulysses_size', 'ep_fsdp_size')


class DeviceMesh:
    """Use DeviceMesh.from_sizes(...)."""

    order = 'tp-cp-ep-dp-pp'

    def __init__(self, _mesh, _dims):
        self._mesh = _mesh
        self._dims = _dims  # the mesh dimensions Twinkle would create, in its order

    @classmethod
    def from_sizes(cls, *, world_size=1, dp_size=1, fsdp_size=None, tp_size=None, pp_size=None, ulysses_size=None,
                   cp_size=None, ep_size=None, etp_size=1, ep_fsdp_size=None, vpp_size=None, device_type=None,
                   sequence_parallel=False):
        """Keyword-only, Twinkle's names and defaults. dp is always a dimension; tp, pp, cp only
        when given (so cp_world_size is 0 when cp_size is None, as in Twinkle).
        device_type None -> 'cpu' (this build's platform). world_size other than 1 must equal
        the product of the sizes. vpp_size > 1: that many model chunks per pipeline rank
        (Megatron's virtual pipeline stages, the interleaved 1F1B schedule; needs pp_size > 1).
        fsdp_size, ulysses_size, ep_fsdp_size > 1 are not supported by twinkle's Megatron backend.
        Raises ValueError (the C++ check's text for
        sizes < 1, an unknown device_type, or etp*ep*pp not dividing the world)."""
        if dp_size is None:
            raise ValueError('DeviceMesh.from_sizes: dp_size must be an int >= 1, got None')
        for name, v in (('fsdp_size', fsdp_size), ('ulysses_size', ulysses_size), ('ep_fsdp_size', ep_fsdp_size)):
            if v is not None and v != 1:
                raise ValueError(f'DeviceMesh.from_sizes: {name}={v} is not supported by twinkle (Megatron backend '
                                 'without FSDP / Ulysses)')
        sizes = {}
        for name, v in (('dp_size', dp_size), ('tp_size', tp_size), ('pp_size', pp_size), ('cp_size', cp_size),
                        ('ep_size', ep_size), ('etp_size', etp_size), ('vpp_size', vpp_size), ('world_size', world_size)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ValueError(f'DeviceMesh.from_sizes: {name} must be an int, got {v!r}')
            sizes[name] = v
        dims = ['pp'] if pp_size is not None else []
        dims.append('dp')
        if cp_size is not None:
            dims.append('cp')
        if tp_size is not None:
            dims.append('tp')
        mesh = _core.DeviceMesh.from_sizes(dp_size, 1 if tp_size is None else tp_size, 1 if pp_size is None else pp_size,
                                           1 if cp_size is None else cp_size, 1 if ep_size is None else ep_size,
                                           1 if etp_size is None else etp_size,
                                           'cpu' if device_type is None else str(device_type), bool(sequence_parallel),
                                           1 if vpp_size is None else vpp_size)
        if world_size != 1 and world_size != mesh.world_size:
            raise ValueError(f'DeviceMesh.from_sizes: world_size {world_size} does not match the product of the sizes '
                             f'({mesh.describe()}: {mesh.world_size} ranks)')
        m = cls(mesh, dims)
        m._ep_given = ep_size
        return m

    # sizes ---------------------------------------------------------------------------------
    @property
    def world_size(self):
        return self._mesh.world_size

    @property
    def device_type(self):
        return self._mesh.device_type

    @property
    def sequence_parallel(self):
        return self._mesh.sequence_parallel

    @property
    def mesh_dim_names(self):
        return tuple(self._dims)

    def _ws(self, dim, size):
        return size if dim in self._dims else 0

    @property
    def dp_world_size(self):
        return self._mesh.dp_size

    @property
    def tp_world_size(self):
        return self._ws('tp', self._mesh.tp_size)

    @property
    def pp_world_size(self):
        return self._ws('pp', self._mesh.pp_size)

    @property
    def vpp_size(self):
        """Model chunks per pipeline rank (virtual pipeline stages; 1 without interleaving)."""
        return self._mesh.vpp_size

    @property
    def cp_world_size(self):
        return self._ws('cp', self._mesh.cp_size)

    @property
    def ep_size(self):
        return self._ep_given

    @property
    def etp_world_size(self):
        return self._mesh.etp_size

    @property
    def data_world_size(self):
        return self._mesh.data_world_size

    # this rank -----------------------------------------------------------------------------
    def _coord(self, dim):
        if dim not in self._dims:
            return None
        return self._mesh.coord(_core.world_rank() % self._mesh.world_size)[dim]

    @property
    def dp_rank(self):
        return self._coord('dp')

    @property
    def tp_rank(self):
        return self._coord('tp')

    @property
    def pp_rank(self):
        return self._coord('pp')

    @property
    def cp_rank(self):
        return self._coord('cp')

    @property
    def data_rank(self):
        return self._coord('dp') or 0

    def get_slice(self, n, rank=None):
        """Twinkle's get_slice: data rank k of d gets [k*q + min(k, m), (k+1)*q + min(k+1, m)),
        q, m = divmod(n, d)."""
        k = self.data_rank if rank is None else rank
        q, m = divmod(n, self.data_world_size)
        return slice(k * q + min(k, m), (k + 1) * q + min(k + 1, m))

    def coord(self, rank):
        """Dense and expert coordinates of a global rank (dict tp, cp, dp, pp, etp, ep, edp)."""
        return self._mesh.coord(rank)

    def groups(self, name):
        """Every group of kind name ('tp', 'cp', 'dp', 'pp', 'dp-cp', 'ep', 'edp', ...) as rank lists."""
        return self._mesh.groups(name)

    def __repr__(self):
        return f"DeviceMesh({self._mesh.describe()}, device_type='{self.device_type}')"
