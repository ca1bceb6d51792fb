"""twinkle.dataset: DatasetMeta and Dataset (Twinkle's src/twinkle/dataset/base.py) over
twinkle::Dataset. Every rank builds its dataset itself, in memory.

Encoded rows hold input_ids, labels, attention_mask, position_ids (int lists) and length, next
to the original columns. Labels follow Hugging Face's convention (aligned with input_ids; the
model shifts), where Twinkle's template rolls them by one: the same training signal."""
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

    def map(self, preprocessor, **kwargs):
        """Applies a preprocessor (twinkle.preprocessor.*) or any callable row -> dict (merged
        into the row; None drops it) to every row. Returns self."""
        if isinstance(preprocessor, _core.Preprocessor):
            self._ds.map_preprocessor(preprocessor)
        elif isinstance(preprocessor, type) and issubclass(preprocessor, _core.Preprocessor):
            self._ds.map_preprocessor(preprocessor(**kwargs))
        elif callable(preprocessor):
            self._ds.map_callable(preprocessor)
        else:
            raise TypeError(f'map: expected a preprocessor or a callable, got {type(preprocessor).__name__}')
        return self

    def filter(self, fn):
        self._ds.filter_callable(fn)
        return self

    def encode(self, add_generation_prompt=False, num_threads=1, **kwargs):
        """Runs the template over every row's messages; rows that encode to nothing are dropped."""
        if add_generation_prompt:
            raise ValueError('encode: add_generation_prompt=True is not supported (training rows only)')
        if kwargs:
            raise TypeError(f'encode() got unexpected keyword arguments {sorted(kwargs)}')
        self._ds.encode(int(num_threads))
        return self

    def __len__(self):
        return self._ds.encoded_len() if self._ds.is_encoded() else len(self._ds)

    def __getitem__(self, i):
        return self._ds.encoded_row(i) if self._ds.is_encoded() else self._ds[i]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]
