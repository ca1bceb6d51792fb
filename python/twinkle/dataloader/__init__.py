"""twinkle.dataloader.DataLoader (Twinkle's src/twinkle/dataloader/*.py) over twinkle::DataLoader.

A batch is a list of row dicts (Twinkle's identity collate): this data-parallel rank's
contiguous block of the global batch; ranks differing only in tp / pp / cp get the same rows.
No shuffle and no padding by default (torch's defaults); len() = ceil(rows / batch_size)."""
from .. import _core

__all__ = ['DataLoader']


class DataLoader:

    def __init__(self, dataset, batch_size=None, *, min_batch_size=None, device_mesh=None, num_workers=0, shuffle=False,
                 drop_last=False, seed=None, collate_fn=None, max_retries=20, **kwargs):
        """dataset: an encoded twinkle.dataset.Dataset. batch_size: global rows per step, a
        multiple of the data-parallel size (ValueError otherwise, the C++ check's text).
        min_batch_size: a final batch with fewer rows ends the epoch (Twinkle's DeviceMeshSampler
        check; len() does not count it). None keeps every final batch, as the C++ DataLoader's
        default (min_batch_size 0): twinkle splits a short last batch over the data-parallel ranks,
        ranks without a row contributing no token, so every layout trains the same rows (Twinkle
        would use the data world size here). ValueError outside [0, batch_size].
        num_workers is accepted (rows are already in memory: no worker processes are needed);
        collate_fn other than None is not supported. The data-parallel rank and size come from
        the mesh of twinkle.initialize."""
        import os
        from ..dataset import Dataset
        if kwargs:
            raise TypeError(f'DataLoader() got unexpected keyword arguments {sorted(kwargs)}')
        if not isinstance(dataset, Dataset):
            raise ValueError(f'DataLoader: dataset must be a twinkle.dataset.Dataset, got {type(dataset).__name__}')
        if batch_size is None or isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValueError(f'DataLoader: batch_size must be an int, got {batch_size!r}')
        if min_batch_size is not None and (isinstance(min_batch_size, bool) or not isinstance(min_batch_size, int)):
            raise ValueError(f'DataLoader: min_batch_size must be an int or None, got {min_batch_size!r}')
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f'DataLoader: num_workers must be an int >= 0, got {num_workers!r}')
        if collate_fn is not None:
            raise ValueError('DataLoader: collate_fn is not supported (a batch is the list of row dicts)')
        if seed is None:
            seed = int(os.environ.get('TWINKLE_SEED', '42'))
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.min_batch_size = min_batch_size
        self.device_mesh = device_mesh
        self._loader = _core.DataLoader(dataset._ds, batch_size, bool(shuffle), int(seed), bool(drop_last),
                                        min_batch_size or 0)

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        if self._loader.epoch_finished():
            self._loader.next_epoch()
        while True:
            batch = self._loader.next_batch()
            if batch is None:
                return
            yield batch

    def get_state(self):
        """{'consumed_train_samples': global rows so far, ...the loader position}."""
        s = self._loader.get_state()
        s['consumed_train_samples'] = s['consumed_samples']
        return s

    def resume_from_checkpoint(self, consumed_train_samples):
        """Positions the loader as if consumed_train_samples global rows had been read."""
        self._loader.skip_samples(int(consumed_train_samples))
