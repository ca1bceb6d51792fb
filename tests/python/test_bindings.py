#!/usr/bin/env python3
"""Every public binding of the Python package twinkle, good and bad arguments,
keyword names and defaults as in Twinkle's (modelscope/twinkle) public API.

Run: PYTHONPATH=build/python .venv/bin/python -m unittest discover -s tests/python
(CTest: python_bindings). One process, no launcher: the mesh is a single rank; the
initialize() failures (npu, cuda, world-size mismatch, bad mode, second call) and Ctrl-C run
in child processes. Losses are checked against the project's PyTorch reference
(tests/reference/qwen3_ref.py) on the weights the model saved."""
import inspect
import json
import math
import os
import signal
import subprocess
import struct
import sys
import tempfile
import time
import types
import unittest

ROOT = os.environ.get('TWINKLE_SOURCE_DIR') or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, 'models', 'qwen3-tiny')
PY = sys.executable

import twinkle  # noqa: E402
from twinkle import DeviceMesh, LoraConfig, Platform, get_device_placement, get_logger  # noqa: E402
from twinkle.dataloader import DataLoader  # noqa: E402
from twinkle.dataset import Dataset, DatasetMeta  # noqa: E402
from twinkle.model import MegatronModel, ModelOutput  # noqa: E402
from twinkle.preprocessor import SelfCognitionProcessor  # noqa: E402


def defaults(fn):
    """{name: default} of the keyword parameters of fn (inspect.Parameter.empty when required)."""
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def run_child(code, env=None, timeout=60):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([PY, '-c', code], capture_output=True, text=True, timeout=timeout, env=e)


def setUpModule():
    twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(dp_size=1, device_type='cpu'))


def encoded_dataset(rows=8, max_length=512):
    ds = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(rows)))
    ds.set_template('Template', model_id=MODEL, max_length=max_length)
    ds.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    ds.encode()
    return ds


class DeviceMeshTest(unittest.TestCase):

    def test_keywords_and_defaults_are_twinkles(self):
        self.assertEqual(defaults(DeviceMesh.from_sizes), dict(
            world_size=1, dp_size=1, fsdp_size=None, tp_size=None, pp_size=None, ulysses_size=None, cp_size=None,
            ep_size=None, etp_size=1, ep_fsdp_size=None, vpp_size=None, device_type=None, sequence_parallel=False))
        kinds = {p.kind for p in inspect.signature(DeviceMesh.from_sizes).parameters.values()}
        self.assertEqual(kinds, {inspect.Parameter.KEYWORD_ONLY})
        with self.assertRaises(TypeError):
            DeviceMesh.from_sizes(2, 2)

    def test_recipe_mesh_layout(self):
        m = DeviceMesh.from_sizes(dp_size=2, tp_size=2, pp_size=2, device_type='cpu')
        self.assertEqual(m.world_size, 8)
        self.assertEqual(m.mesh_dim_names, ('pp', 'dp', 'tp'))
        # Twinkle: arange(8).reshape(pp, dp, tp): r = 4 pp + 2 dp + tp
        for r in range(8):
            c = m.coord(r)
            self.assertEqual(r, 4 * c['pp'] + 2 * c['dp'] + c['tp'])
        self.assertEqual(m.groups('tp'), [[0, 1], [2, 3], [4, 5], [6, 7]])
        self.assertEqual(m.groups('dp'), [[0, 2], [1, 3], [4, 6], [5, 7]])
        self.assertEqual((m.dp_world_size, m.tp_world_size, m.pp_world_size, m.cp_world_size), (2, 2, 2, 0))
        self.assertEqual(m.data_world_size, 2)
        self.assertIsNone(m.cp_rank)
        self.assertEqual(m.order, 'tp-cp-ep-dp-pp')

    def test_defaults_one_dp_rank_cpu(self):
        m = DeviceMesh.from_sizes()
        self.assertEqual((m.world_size, m.mesh_dim_names, m.device_type), (1, ('dp',), 'cpu'))
        self.assertEqual((m.tp_world_size, m.pp_world_size), (0, 0))
        self.assertEqual(m.dp_rank, 0)
        self.assertIsNone(m.ep_size)

    def test_get_slice_is_twinkles(self):
        m = DeviceMesh.from_sizes(dp_size=3)
        # q, m = divmod(10, 3) = 3, 1: [0,4) [4,7) [7,10)
        self.assertEqual([m.get_slice(10, k) for k in range(3)], [slice(0, 4), slice(4, 7), slice(7, 10)])

    def test_moe_mesh_expert_groups(self):
        m = DeviceMesh.from_sizes(dp_size=2, tp_size=2, pp_size=2, cp_size=1, ep_size=2)
        self.assertEqual(m.mesh_dim_names, ('pp', 'dp', 'cp', 'tp'))
        self.assertEqual(m.groups('ep'), m.groups('tp'))  # etp=1: EP group = TP group (Megatron's RankGenerator)
        self.assertEqual(m.ep_size, 2)

    def test_bad_sizes_raise_value_error_with_the_cpp_text(self):
        with self.assertRaisesRegex(ValueError, 'tp'):
            DeviceMesh.from_sizes(tp_size=0)
        with self.assertRaisesRegex(ValueError, 'dp_size'):
            DeviceMesh.from_sizes(dp_size=None)
        with self.assertRaisesRegex(ValueError, 'world_size 6 does not match'):
            DeviceMesh.from_sizes(world_size=6, dp_size=2, tp_size=2)
        with self.assertRaisesRegex(ValueError, 'fsdp_size'):
            DeviceMesh.from_sizes(fsdp_size=2)
        with self.assertRaisesRegex(ValueError, 'vpp = 2 needs pipeline parallelism'):
            DeviceMesh.from_sizes(vpp_size=2)  # pp = 1
        self.assertEqual(DeviceMesh.from_sizes(pp_size=2, vpp_size=2).vpp_size, 2)
        self.assertEqual(DeviceMesh.from_sizes(pp_size=2).vpp_size, 1)
        with self.assertRaisesRegex(ValueError, 'tpu'):
            DeviceMesh.from_sizes(device_type='tpu')
        with self.assertRaisesRegex(ValueError, 'tp_size must be an int'):
            DeviceMesh.from_sizes(tp_size='2')
        with self.assertRaises(ValueError):  # etp*ep*pp must divide the world
            DeviceMesh.from_sizes(dp_size=1, tp_size=1, ep_size=3, pp_size=2)


class InitializeTest(unittest.TestCase):

    def test_keywords_and_defaults_are_twinkles(self):
        self.assertEqual(defaults(twinkle.initialize), dict(
            mode='local', nproc_per_node=8, ncpu_proc_per_node=8, seed=42, full_determinism=False, groups=None,
            global_device_mesh=None, lazy_collect=True, name=None, notifier=None))

    def test_initialized_state(self):
        self.assertTrue(twinkle.is_initialized())
        self.assertEqual(os.environ.get('TWINKLE_SESSION_ID'), str(os.getpid()))
        self.assertEqual((Platform.get_rank(), Platform.get_world_size(), Platform.device_prefix()), (0, 1, 'cpu'))

    def _fails(self, code, exc, text, env=None):
        t0 = time.time()
        r = run_child('import twinkle\nfrom twinkle import DeviceMesh\n' + code, env)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertLess(time.time() - t0, 30)
        self.assertIn(f'{exc}: ', r.stderr)
        self.assertIn(text, r.stderr)
        self.assertNotIn('Segmentation', r.stderr)
        self.assertNotIn('terminate', r.stderr)
        return r.stderr

    def test_npu_fails_at_once_with_the_cpp_message(self):
        self._fails("twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(device_type='npu'))",
                    'RuntimeError', "device_type 'npu' requested but this build has no NPU backend: it needs Huawei "
                    "Ascend's CANN")

    def test_ascend_visible_devices_is_named(self):
        err = self._fails("twinkle.initialize(global_device_mesh=DeviceMesh.from_sizes(device_type='npu'))",
                          'RuntimeError', 'no NPU backend', env={'ASCEND_RT_VISIBLE_DEVICES': '0,1'})
        self.assertIn('[ASCEND_RT_VISIBLE_DEVICES is set]', err)

    def test_cuda_fails_at_once_with_the_cpp_message(self):
        # a build without the CUDA backend names that; a CUDA build on a machine without a GPU says so
        err = self._fails("twinkle.initialize(global_device_mesh=DeviceMesh.from_sizes(device_type='cuda'))",
                          'RuntimeError', "cuda")
        self.assertTrue("device_type 'cuda' requested but this build has no CUDA backend" in err
                        or "device 'cuda': no GPU visible" in err, err)

    def test_world_size_mismatch(self):
        self._fails('twinkle.initialize(global_device_mesh=DeviceMesh.from_sizes(dp_size=2, tp_size=2, pp_size=2))',
                    'RuntimeError', 'world size 1 does not match the device mesh pp=2 x dp=2 x tp=2 (8 ranks)')

    def test_bad_mode_is_a_value_error(self):
        self._fails("twinkle.initialize(mode='ray')", 'ValueError', "InitOptions.mode 'ray' is not supported")

    def test_bad_mesh_type(self):
        self._fails("twinkle.initialize(global_device_mesh='dp=2')", 'ValueError', 'must be a twinkle.DeviceMesh')

    def test_second_call_raises(self):
        r = run_child('import twinkle\ntwinkle.initialize()\ntry:\n    twinkle.initialize()\n'
                      'except RuntimeError as e:\n    print("second:", e)\n')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('second:', r.stdout)


class LoggerPlacementTest(unittest.TestCase):

    def test_logger_is_twinkles(self):
        log = get_logger()
        self.assertIs(log, get_logger())
        self.assertEqual(log.name, 'twinkle')
        self.assertFalse(log.propagate)
        fmt = log.handlers[0].formatter
        import logging
        rec = logging.LogRecord('twinkle', logging.INFO, '', 0, 'hello', None, None)
        line = fmt.format(rec)
        self.assertRegex(line, r'^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]\[INFO:twinkle\] hello$')
        for m in ('info_once', 'warning_once', 'info_if', 'warning_if'):
            self.assertTrue(callable(getattr(log, m)))

    def test_log_level_env(self):
        r = run_child('import twinkle\ntwinkle.initialize()\nlog = twinkle.get_logger()\nlog.info("shown-info")\n'
                      'log.warning("shown-warning")\n', env={'LOG_LEVEL': 'WARNING'})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn('shown-info', r.stderr)
        self.assertIn('[WARNING:twinkle] shown-warning', r.stderr)

    def test_device_placement(self):
        s = get_device_placement()
        self.assertTrue(s.startswith('\n'))
        self.assertIn('DEVICE PLACEMENT TOPOLOGY', s)


class DatasetTest(unittest.TestCase):

    def test_meta_keywords_and_defaults(self):
        self.assertEqual(defaults(DatasetMeta), dict(dataset_id='', subset_name='default', split='train',
                                                     data_slice=None, data=None))
        with self.assertRaisesRegex(ValueError, 'dataset_id or data'):
            DatasetMeta()
        with self.assertRaisesRegex(ValueError, 'iterable'):
            DatasetMeta('x', data_slice=5)

    def test_template_keywords_and_defaults(self):
        d = defaults(Dataset.set_template)
        for k, v in dict(template_cls='Template', model_id=None, max_length=8192, truncation_strategy='raise',
                         default_system=None, enable_thinking=True, use_chat_template=True).items():
            self.assertEqual(d[k], v, k)

    def test_load_slice_wraps_and_map(self):
        rows = [{'query': f'q{i} {{{{NAME}}}}', 'response': f'r{i} {{{{AUTHOR}}}}', 'tag': 'en'} for i in range(3)]
        ds = Dataset(DatasetMeta(data=rows, data_slice=range(5)))
        self.assertEqual(len(ds), 5)
        self.assertEqual(ds[3]['query'], 'q0 {{NAME}}')  # index 3 wraps to row 0
        ds.map(SelfCognitionProcessor())  # defaults 'twinkle robot', 'twinkle lab'
        self.assertEqual(ds[0]['messages'], [
            {'role': 'system', 'content': 'You are a helpful assistant.'},
            {'role': 'user', 'content': 'q0 twinkle robot'},
            {'role': 'assistant', 'content': 'r0 twinkle lab'}])
        self.assertEqual(ds[0]['tag'], 'en')  # columns kept
        ds.map(lambda row: {'extra': len(row['query'])})
        self.assertEqual(ds[1]['extra'], len('q1 twinkle robot'))

    def test_hub_dataset_encode(self):
        ds = encoded_dataset(rows=4)
        self.assertEqual(len(ds), 4)
        row = ds[0]
        for k in ('input_ids', 'labels', 'attention_mask', 'position_ids', 'length', 'query', 'response', 'messages'):
            self.assertIn(k, row)
        n = row['length']
        self.assertEqual([len(row[k]) for k in ('input_ids', 'labels', 'attention_mask', 'position_ids')], [n] * 4)
        self.assertEqual(row['position_ids'], list(range(n)))
        self.assertEqual(row['attention_mask'], [1] * n)
        self.assertEqual(row['labels'][0], -100)  # the system prompt is not trained
        trained = [t for t, l in zip(row['input_ids'], row['labels']) if l != -100]
        self.assertEqual(trained, [l for l in row['labels'] if l != -100])  # HF convention: labels == ids
        self.assertIn('twinkle大模型', json.dumps(row['messages'], ensure_ascii=False) +
                      json.dumps(ds[1]['messages'], ensure_ascii=False) + json.dumps(ds[2]['messages'],
                                                                                    ensure_ascii=False))

    def test_bad_template_arguments(self):
        ds = Dataset(DatasetMeta('ms://swift/self-cognition', data_slice=range(2)))
        with self.assertRaisesRegex(ValueError, 'max_length'):
            ds.set_template('Template', model_id=MODEL, max_length=0)
        with self.assertRaisesRegex(ValueError, 'truncation'):
            ds.set_template('Template', model_id=MODEL, truncation_strategy='middle')
        with self.assertRaisesRegex(ValueError, "template 'Qwen9Template' is unknown"):
            ds.set_template('Qwen9Template', model_id=MODEL)
        with self.assertRaisesRegex(ValueError, 'model_id'):
            ds.set_template('Template')
        with self.assertRaises(TypeError):
            ds.set_template('Template', model_id=MODEL, max_lenght=512)
        with self.assertRaises(RuntimeError):
            ds.encode()  # every set_template above failed: no template

    def test_too_long_row_raises_with_the_row_name(self):
        ds = Dataset(DatasetMeta('ms://swift/self-cognition', data_slice=range(2)))
        ds.set_template('Template', model_id=MODEL, max_length=8)
        ds.map(SelfCognitionProcessor('a', 'b'))
        with self.assertRaisesRegex(RuntimeError, 'exceeds max_length 8'):
            ds.encode()

    def test_missing_file_is_a_runtime_error(self):
        with self.assertRaisesRegex(RuntimeError, 'no_such_file.jsonl'):
            Dataset(DatasetMeta('/nonexistent/no_such_file.jsonl'))

    def test_negative_slice_index(self):
        with self.assertRaises(ValueError):
            Dataset(DatasetMeta('ms://swift/self-cognition', data_slice=[0, -1]))

    def test_preprocessor_errors(self):
        p = SelfCognitionProcessor('n', 'a')
        self.assertEqual(p({'query': '{{NAME}}', 'response': 'x'})['messages'][1]['content'], 'n')
        with self.assertRaisesRegex(RuntimeError, "column 'query' is missing"):
            p({'response': 'x'})
        ds = Dataset(DatasetMeta(data=[{'response': 'x'}]))
        with self.assertRaisesRegex(RuntimeError, "<memory>:1.*'query'"):
            ds.map(p)
        with self.assertRaises(TypeError):
            ds.map(42)

    def test_add_dataset_map_each_and_mix(self):
        # Twinkle's add_dataset / map(dataset_meta=) / mix_dataset(interleave=...): datasets'
        # interleave_datasets docstring example [0, 10, 20, 1, 11, 21, 2, 12, 22]; concatenation in order;
        # shuffle a seeded permutation of it (twinkle/data/mixture.h)
        metas = [DatasetMeta('d%d' % k, data=[{'v': 10 * k + i} for i in range(n)])
                 for k, n in ((0, 3), (1, 4), (2, 3))]

        def build():
            ds = Dataset(metas[0])
            ds.add_dataset(metas[1])
            ds.add_dataset(metas[2])
            return ds
        ds = build()
        with self.assertRaisesRegex(ValueError, 'name one with dataset_meta'):
            ds.map(lambda r: r)
        with self.assertRaisesRegex(ValueError, 'call mix_dataset'):
            ds.encode()
        with self.assertRaisesRegex(ValueError, 'added already'):
            ds.add_dataset(metas[1])
        ds.map(lambda r: {'w': r['v'] + 100}, dataset_meta=metas[1])
        ds.mix_dataset()
        self.assertEqual([r['v'] for r in ds], [0, 10, 20, 1, 11, 21, 2, 12, 22])
        self.assertEqual([r.get('w') for r in ds][:3], [None, 110, None])
        cat = build().mix_dataset(interleave=False)
        self.assertEqual([r['v'] for r in cat], [0, 1, 2, 10, 11, 12, 13, 20, 21, 22])
        sh = [r['v'] for r in build().mix_dataset(interleave=False, shuffle=True, seed=3)]
        self.assertEqual(sorted(sh), [0, 1, 2, 10, 11, 12, 13, 20, 21, 22])
        self.assertNotEqual(sh, [0, 1, 2, 10, 11, 12, 13, 20, 21, 22])
        self.assertEqual(sh, [r['v'] for r in build().mix_dataset(interleave=False, shuffle=True, seed=3)])


class DataLoaderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.ds = encoded_dataset(rows=10)

    def test_keywords_and_defaults(self):
        d = defaults(DataLoader)
        for k, v in dict(batch_size=None, min_batch_size=None, device_mesh=None, num_workers=0).items():
            self.assertEqual(d[k], v, k)

    def test_batches_are_lists_of_row_dicts(self):
        dl = DataLoader(dataset=self.ds, batch_size=4, num_workers=0)
        self.assertEqual(len(dl), 3)  # ceil(10 / 4)
        batches = list(dl)
        self.assertEqual([len(b) for b in batches], [4, 4, 2])
        self.assertIsInstance(batches[0], list)
        self.assertIsInstance(batches[0][0], dict)
        self.assertEqual(batches[1][0]['input_ids'], self.ds[4]['input_ids'])  # sequential, no shuffle
        self.assertEqual(batches[2][1]['query'], self.ds[9]['query'])
        self.assertEqual(len(list(dl)), 3)  # a second epoch
        self.assertEqual(dl.get_state()['consumed_train_samples'], 20)

    def test_min_batch_size_ends_the_epoch_before_a_short_final_batch(self):
        # Twinkle's DeviceMeshSampler: a final batch shorter than min_batch_size ends iteration
        # (10 rows in batches of 4: 4, 4, 2); None keeps it (the C++ DataLoader's default).
        self.assertEqual([len(b) for b in DataLoader(self.ds, batch_size=4, min_batch_size=None)], [4, 4, 2])
        self.assertEqual([len(b) for b in DataLoader(self.ds, batch_size=4, min_batch_size=2)], [4, 4, 2])
        dl = DataLoader(self.ds, batch_size=4, min_batch_size=3)
        self.assertEqual(len(dl), 2)
        self.assertEqual([len(b) for b in dl], [4, 4])
        self.assertEqual(dl.get_state()['consumed_train_samples'], 8)
        for bad in (5, -1, 2.5, True):
            with self.assertRaisesRegex(ValueError, 'min_batch_size'):
                DataLoader(self.ds, batch_size=4, min_batch_size=bad)

    def test_resume(self):
        dl = DataLoader(self.ds, batch_size=2)
        dl.resume_from_checkpoint(4)
        self.assertEqual(next(iter(dl))[0]['input_ids'], self.ds[4]['input_ids'])

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, 'batch_size'):
            DataLoader(self.ds, batch_size=0)
        with self.assertRaisesRegex(ValueError, 'batch_size'):
            DataLoader(self.ds)
        with self.assertRaisesRegex(ValueError, 'num_workers'):
            DataLoader(self.ds, batch_size=2, num_workers=-1)
        with self.assertRaisesRegex(ValueError, 'collate_fn'):
            DataLoader(self.ds, batch_size=2, collate_fn=lambda x: x)
        with self.assertRaisesRegex(ValueError, 'Dataset'):
            DataLoader([1, 2], batch_size=2)
        with self.assertRaises(TypeError):
            DataLoader(self.ds, batch_size=2, pin_memory=True)
        raw = Dataset(DatasetMeta('ms://swift/self-cognition', data_slice=range(2)))
        with self.assertRaisesRegex(RuntimeError, 'encode'):
            DataLoader(raw, batch_size=2)


class LoraConfigTest(unittest.TestCase):

    def test_peft_field_names_and_defaults(self):
        d = defaults(LoraConfig)
        for k, v in dict(r=8, lora_alpha=8, lora_dropout=0.0, target_modules=None, bias='none', use_rslora=False,
                         use_dora=False, modules_to_save=None, init_lora_weights=True, task_type=None).items():
            self.assertEqual(d[k], v, k)
        c = LoraConfig(r=8, lora_alpha=32, target_modules='all-linear')
        self.assertEqual(c.to_dict()['target_modules'], 'all-linear')
        self.assertEqual(LoraConfig.from_any({'r': 4}).r, 4)
        with self.assertRaisesRegex(TypeError, 'unknown field'):
            LoraConfig.from_any({'rank': 4})
        with self.assertRaisesRegex(ValueError, 'r must be'):
            LoraConfig(r=0)


class MegatronModelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.ds = encoded_dataset(rows=8)
        # fp32 (Twinkle's mixed_precision='no'): test_02 holds the loss to the float64 PyTorch reference
        # at 2e-5, which bf16 GEMM inputs exceed; the bf16 default is test_08's
        cls.model = MegatronModel(model_id=MODEL, mixed_precision='no')
        cls.init_dir = cls.model.save('init', output_dir=cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_01_keywords_and_defaults(self):
        d = defaults(MegatronModel)
        for k, v in dict(config=None, ddp_config=None, device_mesh=None, mixed_precision='bf16', load_weights=True,
                         recompute_granularity='full', recompute_method='uniform', recompute_num_layers=1,
                         recompute_modules=None).items():
            self.assertEqual(d[k], v, k)
        self.assertEqual(defaults(MegatronModel.set_optimizer)['optimizer_cls'], 'default')
        self.assertEqual(defaults(MegatronModel.set_lr_scheduler)['scheduler_cls'], 'default')
        self.assertEqual(defaults(MegatronModel.calculate_metric)['is_training'], True)
        self.assertEqual({k: v for k, v in defaults(MegatronModel.save).items() if k != 'self'},
                         dict(name=None, output_dir=None, interval=1, save_optimizer=False, merge_lora=False))
        self.assertEqual({k: v for k, v in defaults(MegatronModel.load).items() if k not in ('self', 'name')},
                         dict(output_dir=None, load_optimizer=False, adapter_name=None))
        fb = inspect.signature(MegatronModel.forward_backward).parameters['inputs']
        self.assertEqual(fb.kind, inspect.Parameter.KEYWORD_ONLY)

    def test_02_forward_only_equals_pytorch_reference(self):
        sys.path.insert(0, os.path.join(ROOT, 'tests', 'reference'))
        import qwen3_ref
        batch = next(iter(DataLoader(self.ds, batch_size=4)))
        out = self.model.forward_only(inputs=batch)
        self.assertIsInstance(out, ModelOutput)
        ref = qwen3_ref.load_model(self.init_dir, qwen3_ref.torch.float64)
        mb = qwen3_ref.make_batch({'input_ids': [r['input_ids'] for r in batch],
                                   'labels': [r['labels'] for r in batch]})
        s, n = ref.loss_sum(mb, False)
        self.assertAlmostEqual(out['loss'], float(s) / n, delta=2e-5 * abs(float(s) / n))

    def test_02b_evaluate_token_weighted_over_dataloader(self):
        # MegatronModel.evaluate: Megatron's token-weighted mean over the batches, against the float64
        # reference's loss sums of the same rows; 3 batches of 2 from a loader of 8 rows (4 batches)
        sys.path.insert(0, os.path.join(ROOT, 'tests', 'reference'))
        import qwen3_ref
        ref = qwen3_ref.load_model(self.init_dir, qwen3_ref.torch.float64)
        dl = DataLoader(self.ds, batch_size=2)
        batches = list(DataLoader(self.ds, batch_size=2))
        sums = []
        with qwen3_ref.torch.no_grad():
            for b in batches:
                mb = qwen3_ref.make_batch({'input_ids': [r['input_ids'] for r in b],
                                           'labels': [r['labels'] for r in b]})
                s, n = ref.loss_sum(mb, False)
                sums.append((float(s), int(n)))
        step = self.model.cur_step
        r = self.model.evaluate(dl, eval_iters=3)
        want = sum(s for s, _ in sums[:3]) / sum(n for _, n in sums[:3])
        self.assertEqual((r['iters'], r['label_tokens']), (3, sum(n for _, n in sums[:3])))
        self.assertAlmostEqual(r['loss'], want, delta=2e-5 * want)
        self.assertAlmostEqual(r['ppl'], math.exp(want), delta=4e-5 * math.exp(want))
        self.assertEqual(self.model.cur_step, step)
        # the next call continues with batch 4 and wraps into the next epoch (Megatron's cyclic iterator)
        r2 = self.model.evaluate(dl, eval_iters=2)
        want2 = (sums[3][0] + sums[0][0]) / (sums[3][1] + sums[0][1])
        self.assertAlmostEqual(r2['loss'], want2, delta=2e-5 * want2)
        # None: one whole epoch
        r3 = self.model.evaluate(DataLoader(self.ds, batch_size=2))
        want3 = sum(s for s, _ in sums) / sum(n for _, n in sums)
        self.assertEqual(r3['iters'], 4)
        self.assertAlmostEqual(r3['loss'], want3, delta=2e-5 * want3)
        with self.assertRaisesRegex(ValueError, 'eval_iters'):
            self.model.evaluate(dl, eval_iters=0)

    def test_03_train_step_metrics_save_load(self):
        m = self.model
        m.set_optimizer(optimizer_cls='default', lr=1e-3)
        m.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=0, lr_decay_steps=4)
        dl = DataLoader(self.ds, batch_size=4)
        batch = next(iter(dl))
        out = m.forward_backward(inputs=batch)
        self.assertTrue(math.isfinite(out.loss) and out.loss > 0)
        # max_grad_norm is honoured (Twinkle ignores it): torch's coefficient max_norm / (norm + 1e-6)
        st = m.clip_grad_and_step(max_grad_norm=1e-3)
        self.assertGreater(st['grad_norm'], 1e-3)
        self.assertAlmostEqual(st['clip_coef'], 1e-3 / (st['grad_norm'] + 1e-6), delta=1e-12)
        self.assertEqual(st['step'], 1)
        metric = m.calculate_metric(is_training=True)
        self.assertIsInstance(metric, dict)
        for k in ('loss', 'grad_norm', 'iters', 'speed', 'total time elapse'):
            self.assertIn(k, metric)
        self.assertAlmostEqual(float(metric['loss']), out.loss, places=3)
        self.assertEqual(m.last_metrics()['loss'], out.loss)
        self.assertIn('TP size', m.get_train_configs())
        # numpy arrays are accepted as inputs
        import numpy as np
        np_batch = [{'input_ids': np.array(r['input_ids']), 'labels': np.array(r['labels'])} for r in batch]
        after = m.forward_only(inputs=np_batch).loss
        self.assertLess(after, out.loss)  # one step at lr 1e-3 on the same rows lowers the loss
        # save with Twinkle's naming, then load it back into a fresh model
        cwd = os.getcwd()
        os.chdir(self.tmp.name)
        try:
            d = m.save()
            self.assertEqual(os.path.normpath(d), os.path.normpath(os.path.join('output', 'checkpoint-step-1')))
            self.assertIsNone(m.save('skipped', interval=2))
        finally:
            os.chdir(cwd)
        full = os.path.join(self.tmp.name, d)
        for f in ('config.json', 'model.safetensors', 'tokenizer.json'):
            self.assertTrue(os.path.exists(os.path.join(full, f)), f)
        fresh = MegatronModel(MODEL, mixed_precision='no')
        fresh.load(full)
        self.assertEqual(fresh.forward_only(inputs=batch).loss, after)

    def test_04_bad_arguments(self):
        m = self.model
        with self.assertRaisesRegex(ValueError, "optimizer option 'lr'"):
            m.set_optimizer(lr=-1.0)
        with self.assertRaisesRegex(ValueError, "adam_beta1"):
            m.set_optimizer(adam_beta1=1.5)
        with self.assertRaisesRegex(ValueError, "optimizer 'SGD' is not supported"):
            m.set_optimizer('SGD')
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'momentum'"):
            m.set_optimizer(momentum=0.9)
        with self.assertRaisesRegex(ValueError, 'lr_warmup_steps'):
            m.set_lr_scheduler(lr_warmup_steps=5, lr_decay_steps=3)
        with self.assertRaisesRegex(ValueError, 'lr_decay_style'):
            m.set_lr_scheduler(lr_decay_style='step')
        with self.assertRaisesRegex(ValueError, "scheduler 'Foo' is not supported"):
            m.set_lr_scheduler('Foo')
        with self.assertRaises(TypeError):
            m.forward_backward(self.ds[0])  # inputs is keyword-only
        with self.assertRaisesRegex(TypeError, 'list of row dicts'):
            m.forward_backward(inputs='text')
        with self.assertRaisesRegex(ValueError, "no 'labels'"):
            m.forward_backward(inputs=[{'input_ids': [1, 2, 3]}])
        with self.assertRaisesRegex(ValueError, 'labels has 2 entries, input_ids 3'):
            m.forward_backward(inputs=[{'input_ids': [1, 2, 3], 'labels': [1, 2]}])
        with self.assertRaisesRegex(ValueError, 'encode the dataset first'):
            m.forward_backward(inputs=[{'messages': []}])
        with self.assertRaisesRegex(ValueError, 'norm_type'):
            m.clip_grad_and_step(norm_type=1)
        with self.assertRaisesRegex(ValueError, 'micro_batch_size'):
            m.forward_only(inputs=[self.ds[0]], micro_batch_size=1)
        for call in (m.forward, m.calculate_loss, m.backward):
            with self.assertRaises(NotImplementedError):
                call()
        with self.assertRaisesRegex(TypeError, 'unknown field'):
            m.add_adapter_to_model('default', {'rank': 8})
        with self.assertRaisesRegex(TypeError, 'unexpected keyword'):
            m.save('x', output_dir=self.tmp.name, save_optimizer=True, consumed=3)
        # async_save: with save_optimizer and the sharded format only, a bool; nothing pending, nothing written
        with self.assertRaisesRegex(ValueError, 'async_save=True needs save_optimizer=True'):
            m.save('x', output_dir=self.tmp.name, async_save=True)
        with self.assertRaisesRegex(ValueError, "async_save=True needs .*'sharded'"):
            m.save('x', output_dir=self.tmp.name, save_optimizer=True, save_format='gathered', async_save=True)
        with self.assertRaisesRegex(TypeError, 'async_save must be a bool'):
            m.save('x', output_dir=self.tmp.name, save_optimizer=True, async_save=1)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, 'x')))
        self.assertFalse(m.save_pending)
        m.wait_for_save()  # nothing pending: does nothing

    def test_06_kernelize_model(self):
        batch = [self.ds[0], self.ds[1]]
        fused = self.model.forward_only(inputs=batch).loss
        self.assertIs(twinkle.kernelize_model(self.model, {'rms_norm': {'cpu': 'reference', 'npu': 'x'}}), self.model)
        ref = self.model.forward_only(inputs=batch).loss
        self.assertAlmostEqual(ref, fused, delta=1e-5 * abs(fused))  # same math, other kernel
        twinkle.kernelize_model(self.model)  # built-in bundle back
        self.assertEqual(self.model.forward_only(inputs=batch).loss, fused)
        with self.assertRaises(ValueError):
            twinkle.kernelize_model(self.model, {'no_such_op': {'cpu': 'fused'}})
        with self.assertRaises(ValueError):
            twinkle.kernelize_model(self.model, {'rms_norm': {'cpu': 'no_such_impl'}})
        with self.assertRaises(TypeError):
            twinkle.kernelize_model(object())
        with self.assertRaisesRegex(ValueError, 'kernels'):
            MegatronModel(MODEL, kernels='fast')


    def test_07_save_optimizer_and_resume(self):
        # Twinkle's save(save_optimizer=True) / resume_from_checkpoint: a fresh model that resumes the
        # checkpoint takes the next step exactly as the saved model does (loss, grad norm, lr).
        m = self.model  # one step taken by test_03 (lr 1e-3, decay over 4 steps)
        batches = list(DataLoader(self.ds, batch_size=4))
        m.forward_backward(inputs=batches[1])
        m.clip_grad_and_step()
        d = m.save('resume', output_dir=self.tmp.name, save_optimizer=True, consumed_train_samples=8)
        with open(os.path.join(d, 'trainer_state.json')) as f:
            self.assertEqual(json.load(f), {'checkpoint_version': 1, 'cur_step': m.cur_step,
                                            'consumed_train_samples': 8, 'gradient_accumulation_steps': 1})
        m.forward_backward(inputs=batches[0])
        want = m.clip_grad_and_step()
        want_loss = m.last_metrics()['loss']
        # other initial weights: the checkpoint must replace them
        fresh = MegatronModel(MODEL, seed=12345, mixed_precision='no')
        fresh.set_optimizer(optimizer_cls='default', lr=1e-3)
        fresh.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=0, lr_decay_steps=4)
        p = fresh.resume_from_checkpoint(self.tmp.name)  # the output dir: 'latest' names the checkpoint
        self.assertEqual(p, {'cur_step': m.cur_step - 1, 'consumed_train_samples': 8, 'gradient_accumulation_steps': 1})
        self.assertEqual(fresh.cur_step, m.cur_step - 1)
        fresh.forward_backward(inputs=batches[0])
        got = fresh.clip_grad_and_step()
        self.assertEqual(fresh.last_metrics()['loss'], want_loss)
        self.assertEqual((got['grad_norm'], got['lr'], got['step']), (want['grad_norm'], want['lr'], want['step']))
        with self.assertRaisesRegex(RuntimeError, 'not a checkpoint'):
            fresh.resume_from_checkpoint(os.path.join(self.tmp.name, 'init'))
        # Twinkle's load(name, output_dir, load_optimizer=True): the same exact continuation
        loaded = MegatronModel(MODEL, seed=777, mixed_precision='no')
        loaded.set_optimizer(optimizer_cls='default', lr=1e-3)
        loaded.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=0, lr_decay_steps=4)
        self.assertEqual(loaded.load('resume', output_dir=self.tmp.name, load_optimizer=True), p)
        self.assertEqual(loaded.cur_step, m.cur_step - 1)
        loaded.forward_backward(inputs=batches[0])
        got = loaded.clip_grad_and_step()
        self.assertEqual(loaded.last_metrics()['loss'], want_loss)
        self.assertEqual((got['grad_norm'], got['lr'], got['step']), (want['grad_norm'], want['lr'], want['step']))
        # save(async_save=True): returns before the checkpoint exists, the next step runs meanwhile,
        # wait_for_save() commits it; a model loading it continues exactly as the saving one did
        d = loaded.save('async', output_dir=self.tmp.name, save_optimizer=True, async_save=True)
        self.assertTrue(loaded.save_pending)
        self.assertFalse(os.path.exists(d))
        loaded.forward_backward(inputs=batches[1])
        want = loaded.clip_grad_and_step()
        want_loss = loaded.last_metrics()['loss']
        loaded.wait_for_save()
        self.assertFalse(loaded.save_pending)
        with open(os.path.join(d, f'iter_{loaded.cur_step - 1:07d}', 'state.json')) as f:
            self.assertEqual(json.load(f)['save_format'], 'sharded')
        again = MegatronModel(MODEL, seed=99, mixed_precision='no')
        again.set_optimizer(optimizer_cls='default', lr=1e-3)
        again.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=0, lr_decay_steps=4)
        self.assertEqual(again.load('async', output_dir=self.tmp.name, load_optimizer=True)['cur_step'],
                         loaded.cur_step - 1)
        again.forward_backward(inputs=batches[1])
        got = again.clip_grad_and_step()
        self.assertEqual(again.last_metrics()['loss'], want_loss)
        self.assertEqual((got['grad_norm'], got['lr'], got['step']), (want['grad_norm'], want['lr'], want['step']))
        # a Hugging Face checkpoint without optimizer state: the weights only, with Twinkle's warning
        hf_only = MegatronModel(MODEL, seed=777, mixed_precision='no')
        hf_only.set_optimizer(optimizer_cls='default', lr=1e-3)
        with self.assertLogs(twinkle.get_logger(), level='WARNING') as logs:
            self.assertIsNone(hf_only.load('init', output_dir=self.tmp.name, load_optimizer=True))
        self.assertIn('holds no optimizer state', '\n'.join(logs.output))
        self.assertEqual(hf_only.cur_step, 0)
        self.assertEqual(hf_only.forward_only(inputs=batches[0]).loss, self.model_at_init_loss(batches[0]))
        with self.assertRaisesRegex(TypeError, 'unexpected keyword'):
            hf_only.load('init', output_dir=self.tmp.name, no_load_rng=True)

    def model_at_init_loss(self, batch):
        return MegatronModel(self.init_dir, mixed_precision='no').forward_only(inputs=batch).loss

    def test_08_mixed_precision_reaches_the_cpp_model(self):
        # Twinkle's default mixed_precision='bf16' builds the C++ model with bf16 GEMM inputs
        # (MegatronModelOptions::mixed_precision, `--bf16`); 'no' and its C++ name 'fp32' build it in fp32.
        # A binding that dropped the option would build fp32 for the default: its configs would say so and
        # its loss would equal the fp32 one (bf16 rounding of the GEMM inputs moves it by ~1e-5..1e-3).
        batch = [self.ds[0], self.ds[1], self.ds[2]]
        init = self.init_dir  # the class model's initial weights (test_03 trains the class model)
        bf16, fp32, alias = MegatronModel(init), MegatronModel(init, mixed_precision='no'), \
            MegatronModel(init, mixed_precision='fp32')
        self.assertIn('Mixed precision: bf16', bf16.get_train_configs())
        for m in (fp32, alias):
            self.assertIn('Mixed precision: fp32', m.get_train_configs())
        lb, lf = bf16.forward_only(inputs=batch).loss, fp32.forward_only(inputs=batch).loss
        self.assertEqual(alias.forward_only(inputs=batch).loss, lf)
        self.assertGreater(abs(lb - lf) / lf, 1e-6)  # bf16 really computed in bf16
        self.assertLess(abs(lb - lf) / lf, 1e-2)     # and is the same model
        self.assertEqual(lf, self.model_at_init_loss(batch))
    def test_09_tensorboard_dir(self):
        # MegatronModel(..., tensorboard_dir=...) (Megatron's --tensorboard-dir; twinkle::MegatronModelOptions):
        # a pathlib.Path is accepted, the event file appears at the first step, TensorBoard's own reader gets
        # the step's scalars under twinkle train's tags, equal to last_metrics(); a non-path is a TypeError.
        import pathlib
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        tb = pathlib.Path(self.tmp.name) / 'tb'
        m = MegatronModel(self.init_dir, mixed_precision='no', tensorboard_dir=tb)
        m.set_optimizer(optimizer_cls='default', lr=1e-3)
        self.assertEqual(m.tensorboard_path, '')
        batches = list(DataLoader(self.ds, batch_size=4))
        logged = []
        for b in batches:
            m.forward_backward(inputs=b)
            m.clip_grad_and_step()
            logged.append(m.last_metrics())
        self.assertTrue(m.tensorboard_path.startswith(str(tb) + os.sep), m.tensorboard_path)
        self.assertGreater(logged[-1]['peak_memory_bytes'], 1 << 20)
        ea = EventAccumulator(str(tb), size_guidance={'scalars': 0})
        ea.Reload()
        tags = set(ea.Tags()['scalars'])
        for t in ('lm loss', 'grad-norm', 'learning-rate', 'tokens-per-sec', 'mfu', 'iteration-time',
                  'mem-max-allocated-bytes'):
            self.assertIn(t, tags)
        f32 = lambda v: struct.unpack('f', struct.pack('f', v))[0]  # noqa: E731 (TensorBoard's simple_value)
        self.assertEqual([(e.step, e.value) for e in ea.Scalars('lm loss')],
                         [(i + 1, f32(x['loss'])) for i, x in enumerate(logged)])
        self.assertEqual([e.value for e in ea.Scalars('mem-max-allocated-bytes')],
                         [f32(x['peak_memory_bytes']) for x in logged])
        with self.assertRaises(TypeError):
            MegatronModel(self.init_dir, mixed_precision='no', tensorboard_dir=5)

    def test_05_bad_model_arguments(self):
        with self.assertRaisesRegex(ValueError, 'micro_batch_size'):
            MegatronModel(MODEL, micro_batch_size=-1)
        with self.assertRaisesRegex(ValueError, 'on_nonfinite'):
            MegatronModel(MODEL, on_nonfinite='ignore')
        with self.assertRaisesRegex(ValueError, 'mixed_precision'):
            MegatronModel(MODEL, mixed_precision='int8')
        with self.assertRaisesRegex(ValueError, "mixed_precision='fp16' is not implemented"):
            MegatronModel(MODEL, mixed_precision='fp16')
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'use_flash'"):
            MegatronModel(MODEL, use_flash=True)
        with self.assertRaisesRegex(RuntimeError, 'nonexistent_model'):
            MegatronModel('/nonexistent_model')


class LoraAdapterTest(unittest.TestCase):
    """add_adapter_to_model over the C++ LoRA (PEFT's field names); the numerics against
    `twinkle train --lora-*` are tests/reference/check_python_lora.py (CTest python_lora_equals_cli_lora)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.ds = encoded_dataset(rows=4)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def adapter_of(self, model, name):
        d = model.save(name, output_dir=self.tmp.name)
        with open(os.path.join(d, 'adapter_config.json')) as f:
            cfg = json.load(f)
        return d, cfg

    def test_bad_configs(self):
        m = MegatronModel(MODEL)
        for bad, msg in ((dict(use_dora=True), 'use_dora'), (dict(bias='all'), 'bias'),
                         (dict(init_lora_weights='pissa'), 'init_lora_weights'),
                         (dict(modules_to_save=['lm_head']), 'modules_to_save'),
                         (dict(rank_pattern={'q_proj': 4}), 'rank_pattern'),
                         (dict(lora_bias=True), 'lora_bias'), (dict(layer_replication=[[0, 1]]), 'layer_replication'),
                         (dict(trainable_token_indices=[5]), 'trainable_token_indices'),
                         (dict(target_parameters=['mlp.down_proj.weight']), 'target_parameters'),
                         (dict(lora_alpha=-1), "lora option 'lora_alpha'"),
                         (dict(lora_dropout=1.0), 'lora_dropout'),
                         (dict(target_modules=['qproj']), "'qproj' matches no linear module"),
                         (dict(target_modules='.*xyz'), 'matches no linear module'),
                         # PEFT matches a str against EVERY module name and refuses what it cannot wrap
                         # (self_attn, a Qwen3Attention) or wraps what twinkle cannot (embed_tokens, lm_head):
                         # refused by name instead of training fewer modules than asked
                         (dict(target_modules='.*attn'), 'selects model.layers.0.self_attn, the attention container'),
                         (dict(target_modules=r'.*\.(q_proj|embed_tokens)'),
                          'selects model.embed_tokens, an nn.Embedding'),
                         (dict(target_modules=['q_proj', 'lm_head']),
                          "the entry 'lm_head' of target_modules 'q_proj,lm_head' selects lm_head, the output layer"),
                         (dict(target_modules=[]), 'non-empty list')):
            with self.assertRaisesRegex(ValueError, msg):
                m.add_adapter_to_model('default', LoraConfig(**bad))
        # a peft.LoraConfig-like object: its fields twinkle does not support are refused, not dropped
        with self.assertRaisesRegex(ValueError, 'lora_bias'):
            m.add_adapter_to_model('default', types.SimpleNamespace(r=8, lora_alpha=8, lora_bias=True))
        with self.assertRaisesRegex(TypeError, 'unexpected keyword'):
            m.add_adapter_to_model('default', LoraConfig(), gradient_checkpointing=True)
        with self.assertRaisesRegex(TypeError, 'expected a LoraConfig'):
            m.add_adapter_to_model('default', 8)
        with self.assertRaisesRegex(RuntimeError, 'adapter_config.json'):
            m.add_adapter_to_model('default', self.tmp.name)  # not an adapter directory
        self.assertFalse(m.has_adapter)  # nothing above added one

    def test_dropout_is_accepted_and_saved(self):
        # lora_dropout is implemented (PEFT: dropout on the adapter input, training only); it reaches the
        # C++ config and PEFT's adapter_config.json
        m = MegatronModel(MODEL)
        m.add_adapter_to_model('default', LoraConfig(lora_dropout=0.1))
        self.assertTrue(m.has_adapter)
        _, cfg = self.adapter_of(m, 'dropout')
        self.assertAlmostEqual(cfg['lora_dropout'], 0.1)

    def test_targets_follow_peft(self):
        # None: PEFT's default for Qwen3 (q_proj, v_proj); a str: a regular expression in full
        m = MegatronModel(MODEL)
        m.add_adapter_to_model('default', LoraConfig())
        self.assertTrue(m.has_adapter)
        _, cfg = self.adapter_of(m, 'default_targets')
        self.assertEqual(sorted(cfg['target_modules']), ['q_proj', 'v_proj'])
        self.assertEqual((cfg['r'], cfg['lora_alpha']), (8, 8))
        with self.assertRaisesRegex(ValueError, 'already has adapter'):
            m.add_adapter_to_model('second', LoraConfig())
        m2 = MegatronModel(MODEL)
        m2.add_adapter_to_model('default', {'r': 2, 'lora_alpha': 6, 'use_rslora': True,
                                             'target_modules': r'model\.layers\.1\.mlp\.(up|down)_proj'})
        d, cfg = self.adapter_of(m2, 'regex_targets')
        self.assertEqual((cfg['r'], cfg['lora_alpha'], cfg['use_rslora']), (2, 6, True))
        sys.path.insert(0, os.path.join(ROOT, 'tests', 'reference'))
        import safetensors_py
        keys = sorted(safetensors_py.load(os.path.join(d, 'adapter_model.safetensors')))
        self.assertEqual(keys, sorted(f'base_model.model.model.layers.1.mlp.{p}.lora_{ab}.weight'
                                      for p in ('up_proj', 'down_proj') for ab in 'AB'))

    def test_train_save_reload(self):
        # a peft.LoraConfig-like object is accepted; init False makes the adapter change the loss
        from types import SimpleNamespace
        peft_like = SimpleNamespace(r=4, lora_alpha=16, target_modules=['q_proj', 'down_proj'],
                                    init_lora_weights=False, lora_dropout=0.0)
        m = MegatronModel(MODEL, mixed_precision='no')  # fp32: the merged export must equal the adapter at 1e-5 (bf16 rounds W + BA and W apart)
        batch = [self.ds[0], self.ds[1]]
        base = m.forward_only(inputs=batch).loss
        self.assertNotIn('Adapter config', m.get_train_configs())
        m.add_adapter_to_model('default', peft_like)
        self.assertIn('Adapter config: default {"r": 4, "lora_alpha": 16, "target_modules": "q_proj,down_proj"',
                      m.get_train_configs())  # Twinkle's get_train_configs line
        with_adapter = m.forward_only(inputs=batch).loss
        self.assertNotEqual(with_adapter, base)
        m.set_optimizer(lr=1e-3)
        m.forward_backward(inputs=batch)
        self.assertGreater(m.clip_grad_and_step()['grad_norm'], 0)
        trained = m.forward_only(inputs=batch).loss
        self.assertLess(trained, with_adapter)
        d, cfg = self.adapter_of(m, 'trained')
        self.assertEqual(sorted(cfg['target_modules']), ['down_proj', 'q_proj'])
        self.assertFalse(os.path.exists(os.path.join(d, 'model.safetensors')))
        merged = m.save('merged', output_dir=self.tmp.name, merge_lora=True)
        self.assertTrue(os.path.exists(os.path.join(merged, 'model.safetensors')))
        # the adapter directory loads back (str config_or_dir) and gives the same loss
        fresh = MegatronModel(MODEL, mixed_precision='no')
        fresh.add_adapter_to_model('default', d)
        self.assertEqual(fresh.forward_only(inputs=batch).loss, trained)
        full = MegatronModel(merged, mixed_precision='no')
        self.assertAlmostEqual(full.forward_only(inputs=batch).loss, trained, delta=1e-5 * trained)


class CtrlCTest(unittest.TestCase):

    def test_sigint_during_training_stops_the_process(self):
        code = (
            'import sys, twinkle\n'
            'from twinkle.model import MegatronModel\n'
            'twinkle.initialize()\n'
            f'm = MegatronModel({MODEL!r})\n'
            'row = {"input_ids": list(range(1, 400)), "labels": list(range(1, 400))}\n'
            'print("ready", flush=True)\n'
            'while True:\n'
            '    m.forward_backward(inputs=[row, row])\n'
            '    m.clip_grad_and_step()\n')
        p = subprocess.Popen([PY, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), 'ready')
            time.sleep(1.0)
            p.send_signal(signal.SIGINT)
            rc = p.wait(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        self.assertNotEqual(rc, 0)
        self.assertTrue('interrupted (SIGINT)' in err or 'KeyboardInterrupt' in err, err)


if __name__ == '__main__':
    unittest.main()
