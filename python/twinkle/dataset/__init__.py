"""twinkle.dataset: DatasetMeta and Dataset (Twinkle's src/twinkle/dataset/base.py) over
twinkle::Dataset. Every rank builds its dataset itself, in memory.

Encoded rows hold input_ids, labels, attention_mask, position_ids (int lists) and length, next
to the original columns. Labels follow Hugging Face's convention (aligned with input_ids; the
model shifts), where Twinkle's template rolls them by one: the same training signal."""
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .. import _core

__all__ = ['Dataset', 'DatasetMeta']


@dataclass
class DatasetMeta:
    """dataset_id: local .jsonl/.json/.csv/.parquet file or directory, or a hub id (ms://owner/name,
    hf://owner/name, owner/name; resolved offline from the local caches, see twinkle/data/hub.h).
    data_slice: any iterable of row indices (range(256)); indices past the end wrap around.
    data: in-memory rows (list of dicts) instead of an id."""
    dataset_id: str = ''
    subset_name: str = 'default'
    split: str = 'train'
    data_slice: Optional[Iterable] = None
    data: Optional[Any] = None

    def __post_init__(self):
        if self.data_slice is not None:
            try:
                iter(self.data_slice)
            except TypeError:
                raise ValueError(f'DatasetMeta: data_slice must be iterable (e.g. range(256)), got '
                                 f'{type(self.data_slice).__name__}') from None
        if not self.dataset_id and self.data is None:
            raise ValueError('DatasetMeta: give a dataset_id or data')


class Dataset:

    def __init__(self, dataset_meta: DatasetMeta, skip_bad_rows: bool = False, **kwargs):
        """Loads the rows (ValueError for a bad meta or slice, RuntimeError with the file:line
        for a malformed file or an id that cannot be resolved)."""
        if kwargs:
            raise TypeError(f'Dataset() got unexpected keyword arguments {sorted(kwargs)}')
        if not isinstance(dataset_meta, DatasetMeta):
            raise ValueError(f'Dataset: dataset_meta must be a DatasetMeta, got {type(dataset_meta).__name__}')
        self.dataset_meta = dataset_meta
        sl = None
        if dataset_meta.data_slice is not None:
            sl = [int(i) for i in dataset_meta.data_slice]
        if dataset_meta.data is not None:
            rows = list(dataset_meta.data)
            if sl is not None:
                if not rows:
                    raise ValueError('Dataset: data is empty')
                rows = [rows[i % len(rows)] for i in sl]
            self._ds = _core.Dataset.from_rows(rows, dataset_meta.dataset_id or '<memory>')
        else:
            self._ds = _core.Dataset(dataset_meta.dataset_id, sl, dataset_meta.subset_name, dataset_meta.split,
                                     bool(skip_bad_rows))
        self.template = None
        self._skip_bad_rows = bool(skip_bad_rows)
        # Twinkle's self.datasets: every added dataset by DatasetMeta.get_id(), mixed by mix_dataset
        self._parts = {self._key(dataset_meta): self._ds}

    @staticmethod
    def _key(meta):
        """Twinkle's DatasetMeta.get_id()."""
        return (meta.dataset_id or '<memory>').replace(os.sep, '_').replace('.', '_') + ':' + meta.subset_name + ':' + \
            meta.split

    def _load(self, meta):
        if meta.data is not None:
            return Dataset(meta)._ds
        sl = None if meta.data_slice is None else [int(i) for i in meta.data_slice]
        return _core.Dataset(meta.dataset_id, sl, meta.subset_name, meta.split, self._skip_bad_rows)

    def add_dataset(self, dataset_meta: DatasetMeta, **kwargs):
        """Twinkle's add_dataset: loads another dataset (its data_slice is its sample: indices past the
        end wrap, so range(N) with N > len repeats rows), to be preprocessed with
        map(..., dataset_meta=dataset_meta) and joined by mix_dataset()."""
        if kwargs:
            raise TypeError(f'add_dataset() got unexpected keyword arguments {sorted(kwargs)}')
        if not isinstance(dataset_meta, DatasetMeta):
            raise ValueError(f'add_dataset: dataset_meta must be a DatasetMeta, got {type(dataset_meta).__name__}')
        key = self._key(dataset_meta)
        if key in self._parts:
            raise ValueError(f'add_dataset: {key} was added already')
        self._parts[key] = self._load(dataset_meta)
        return self

    def mix_dataset(self, interleave=True, shuffle=False, seed=42):
        """Twinkle's mix_dataset: interleave=True is datasets.interleave_datasets' round robin (one row
        of each dataset in turn until the shortest ends), interleave=False concatenate_datasets; with
        shuffle=True (and interleave=False) the concatenation is shuffled with `seed` (ms-swift's
        dataset_shuffle). Mix before encode(). twinkle/data/mixture.h."""
        if len(self._parts) > 1:
            mode = 'interleave' if interleave else ('shuffle' if shuffle else 'concat')
            parts = list(self._parts.values())
            self._ds = _core.mix_datasets(parts, mode, int(seed), [-1] * len(parts))
            self._parts = {self._ds.id: self._ds}
        return self

    def _target(self, dataset_meta):
        if dataset_meta is None:
            if len(self._parts) > 1:
                raise ValueError('map/filter: several datasets were added; name one with dataset_meta=')
            return self._ds
        key = self._key(dataset_meta)
        if key not in self._parts:
            raise ValueError(f'map/filter: {key} is not one of the added datasets {sorted(self._parts)}')
        return self._parts[key]

    def set_template(self, template_cls='Template', model_id=None, max_length=8192, truncation_strategy='raise',
                     default_system=None, enable_thinking=True, use_chat_template=True, **kwargs):
        """Twinkle's Template(model_id, use_chat_template=True, max_length=8192,
        truncation_strategy='raise', default_system=None, enable_thinking=True). 'Template' is
        the Qwen3 chat template. ValueError for an unknown template, max_length < 1, an unknown
        truncation_strategy (raise, left, right, delete, split) or use_chat_template=False."""
        if kwargs:
            raise TypeError(f'set_template() got unexpected keyword arguments {sorted(kwargs)}')
        if not model_id:
            raise ValueError('set_template: model_id is required (a model directory or hub id)')
        if not use_chat_template:
            raise ValueError('set_template: use_chat_template=False is not supported (the Qwen3 chat template is used)')
        self._ds.set_template(str(template_cls), str(model_id), int(max_length), str(truncation_strategy),
                              bool(enable_thinking), default_system or '')
        self.template = template_cls

    def map(self, preprocessor, dataset_meta: DatasetMeta = None, **kwargs):
        """Applies a preprocessor (twinkle.preprocessor.*) or any callable row -> dict (merged
        into the row; None drops it) to every row of the dataset (of `dataset_meta`'s one after
        add_dataset). Returns self."""
        ds = self._target(dataset_meta)
        if isinstance(preprocessor, _core.Preprocessor):
            ds.map_preprocessor(preprocessor)
        elif isinstance(preprocessor, type) and issubclass(preprocessor, _core.Preprocessor):
            ds.map_preprocessor(preprocessor(**kwargs))
        elif callable(preprocessor):
            ds.map_callable(preprocessor)
        else:
            raise TypeError(f'map: expected a preprocessor or a callable, got {type(preprocessor).__name__}')
        return self

    def filter(self, fn, dataset_meta: DatasetMeta = None):
        self._target(dataset_meta).filter_callable(fn)
        return self

    def encode(self, add_generation_prompt=False, num_threads=1, **kwargs):
        """Runs the template over every row's messages; rows that encode to nothing are dropped."""
        if add_generation_prompt:
            raise ValueError('encode: add_generation_prompt=True is not supported (training rows only)')
        if kwargs:
            raise TypeError(f'encode() got unexpected keyword arguments {sorted(kwargs)}')
        if len(self._parts) > 1:
            raise ValueError(f'encode: {len(self._parts)} datasets were added; call mix_dataset() first')
        self._ds.encode(int(num_threads))
        return self

    def __len__(self):
        return self._ds.encoded_len() if self._ds.is_encoded() else len(self._ds)

    def __getitem__(self, i):
        return self._ds.encoded_row(i) if self._ds.is_encoded() else self._ds[i]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]
