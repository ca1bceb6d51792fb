"""twinkle.model.MegatronModel (Twinkle's src/twinkle/model/megatron/megatron.py) over
twinkle::MegatronModel: Qwen3 with TP + SP + 1F1B PP + DP (ZeRO-1) + CP on the global mesh, full
parameters or a LoRA adapter (add_adapter_to_model).

Differences from upstream Twinkle, on purpose (as the C++ API): clip_grad_and_step honours
max_grad_norm (None = the optimizer's clip_grad, 1.0: Twinkle's effective behaviour), gradients
are zeroed after every step, the reported loss is the global per-token mean, and metrics add
tokens/s and MFU."""
import os

from .. import _core
from ..lora import LoraConfig

__all__ = ['MegatronModel', 'ModelOutput']


class ModelOutput(dict):
    """{'loss': float, 'logits': None} (Twinkle's ModelOutput; logits are not returned)."""

    @property
    def loss(self):
        return self['loss']


# Twinkle's mixed_precision values -> twinkle::MegatronModelOptions::mixed_precision ('fp32' is
# accepted too, the C++ name of Twinkle's 'no'); 'fp16' has no CPU path (ValueError)
_MIXED_PRECISION = {'bf16': 'bf16', 'no': 'fp32', 'fp32': 'fp32'}
_RECOMPUTE = ('full', 'selective', None)


# PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the model types twinkle trains
_PEFT_DEFAULT_TARGETS = ['q_proj', 'v_proj']
# LoraConfig fields twinkle does not implement: (field, the value that means "not used")
_LORA_UNSUPPORTED = (('exclude_modules', None), ('bias', 'none'), ('fan_in_fan_out', False), ('use_dora', False),
                     ('modules_to_save', None), ('layers_to_transform', None), ('layers_pattern', None),
                     ('rank_pattern', {}), ('alpha_pattern', {}), ('inference_mode', False), ('lora_bias', False),
                     ('trainable_token_indices', None), ('layer_replication', None), ('target_parameters', None))


def _lora_options(cfg, linear_modules, other_modules=()):
    """PEFT's LoraConfig -> the keyword dict of twinkle::LoraConfig (python/src/model.cpp).
    other_modules: (name, what) of the modules twinkle gives no adapter (embedding, lm head, norms,
    containers); PEFT matches a str target_modules against every module name, so a regular
    expression selecting one of them is refused (as the C++ resolve_lora_targets refuses list entries)."""
    for name, unused in _LORA_UNSUPPORTED:
        value = getattr(cfg, name)
        if value != unused and not (unused is None and value in ([], ())):
            raise ValueError(f'LoraConfig.{name}={value!r} is not supported by twinkle (supported: r, lora_alpha, '
                             'lora_dropout, target_modules, use_rslora, init_lora_weights)')
    init = cfg.init_lora_weights
    if init is True or init is False:
        init = 'true' if init else 'false'
    elif init != 'gaussian':
        raise ValueError(f'LoraConfig.init_lora_weights={init!r} is not supported by twinkle (True, False or '
                         "'gaussian')")
    t = cfg.target_modules
    if t is None:
        targets = ','.join(_PEFT_DEFAULT_TARGETS)
    elif isinstance(t, str):
        if t == 'all-linear':
            targets = t
        else:  # PEFT: a str is a regular expression that must match a module name in full
            import re
            for name, what in other_modules:
                if re.fullmatch(t, name):
                    raise ValueError(f"lora option 'lora_targets' (--lora-targets): target_modules '{t}' (PEFT's "
                                     f"regular expression, matched against every module name) selects {name}, {what}; "
                                     'twinkle gives LoRA adapters to linear layers only (q/k/v/o_proj, '
                                     'gate/up/down_proj, the MoE router and experts), not the lm head: select only '
                                     f'those (e.g. all-linear, or a pattern that leaves {name} out) rather than train '
                                     'fewer modules than asked')
            hit = [m for m in linear_modules if re.fullmatch(t, m)]
            if not hit:
                raise ValueError(f'LoraConfig.target_modules={t!r} (a regular expression, as in PEFT) matches no '
                                 f'linear module, e.g. {linear_modules[0] if linear_modules else "-"}')
            targets = ','.join(hit)
    else:
        entries = list(t)
        if not entries or not all(isinstance(x, str) and x and ',' not in x for x in entries):
            raise ValueError(f'LoraConfig.target_modules must be a non-empty list of module names, got {t!r}')
        targets = ','.join(entries)
    return dict(r=int(cfg.r), lora_alpha=float(cfg.lora_alpha), target_modules=targets,
                lora_dropout=float(cfg.lora_dropout), use_rslora=bool(cfg.use_rslora), init_lora_weights=init)


class MegatronModel:

    def __init__(self, model_id, config=None, ddp_config=None, device_mesh=None, mixed_precision='bf16',
                 load_weights=True, recompute_granularity='full', recompute_method='uniform', recompute_num_layers=1,
                 recompute_modules=None, **kwargs):
        """model_id: a Hugging Face Qwen3 directory or hub id. Twinkle's keywords are accepted:
        mixed_precision: 'bf16' (Twinkle's default, and this binding's) trains with bf16 GEMM inputs,
        fp32 accumulation and fp32 master weights / gradients / AdamW state:
        twinkle::MegatronModelOptions::mixed_precision "bf16", the C++ recipes' --bf16 (cpu and
        cuda; on a device without the bf16 path the C++ error names it: pass 'no'). Twinkle's Megatron
        backend keeps bf16 params and activations (Float16Module) with fp32 main params in the
        distributed optimizer; twinkle rounds only the GEMM inputs to bf16 and keeps activations,
        norms, softmax and cross entropy in fp32.
        'no' (or 'fp32') computes everything in fp32 (the C++ API's default, --fp32); 'fp16'
        is not implemented (ValueError). The checkpoint is saved in config.json's dtype either
        way. So examples/python/tp.py, which keeps Twinkle's default, equals
        `examples/tp_recipe --bf16`; recompute_granularity ('full' default,
        'selective', None) selects activation recompute (bit-identical results, less memory;
        recompute_method / recompute_num_layers / recompute_modules: only uniform, 1, core_attn);
        config / ddp_config (mcore objects) are not supported. Other keywords are twinkle's
        MegatronModelOptions: micro_batch_size (0 = Twinkle's min(2, local rows)), seed,
        layers_per_stage, pipeline_split ('balanced' | 'even'), packing, lm_head_chunk_tokens,
        on_nonfinite ('error' | 'skip'), kernels, cp_comm_type ('p2p' | 'a2a'), and for Qwen3-MoE
        moe_aux_loss_type (default 'per_layer': Megatron's per-layer load-balancing loss, what
        Twinkle's Megatron backend trains with; 'global' = transformers'), moe_aux_loss_coeff
        (None = config.json's router_aux_loss_coef when output_router_logits, else 0, as the C++
        API), moe_z_loss_coeff (0); overlap_grad_reduce / overlap_param_gather (False, as Megatron's
        DistributedDataParallelConfig: overlap the dp gradient reduce-scatter with the backward and
        the parameter all-gather with the next forward; bit-identical results) and bucket_size
        (gradient bucket elements, Megatron's; None = 4 MiB buckets); tensorboard_dir (Megatron's
        --tensorboard-dir, as Twinkle passes Megatron's arguments by keyword; a str or os.PathLike,
        None = off): rank 0 writes every clip_grad_and_step's scalars to a new TensorBoard event file
        there under the tags of `twinkle train --tensorboard-dir` ('lm loss', 'grad-norm',
        'learning-rate', 'tokens-per-sec', 'mfu', 'iteration-time', 'mem-max-allocated-bytes'; MoE:
        'load_balancing_loss', 'z_loss', 'expert-grad-norm', 'expert-load-max', ...) at step cur_step,
        flushed every step; after resume_from_checkpoint / load(load_optimizer=True) at step N the new
        file starts with SessionLog START at N + 1, so TensorBoard shows one curve
        (twinkle::MegatronModelOptions::tensorboard_dir; tensorboard_path names the file).
        Collective over the world. ValueError / TypeError for bad options; RuntimeError
        when the model does not fit the mesh or cannot be loaded."""
        if config is not None or ddp_config is not None:
            raise ValueError('MegatronModel: config / ddp_config (Megatron-core objects) are not supported; pass '
                             'TransformerConfig-like settings as keywords')
        if mixed_precision == 'fp16':
            raise ValueError("MegatronModel: mixed_precision='fp16' is not implemented by twinkle (fp16 with loss "
                             "scaling); use 'bf16' (the default) or 'no' (fp32)")
        if mixed_precision not in _MIXED_PRECISION:
            raise ValueError(f"MegatronModel: mixed_precision must be one of 'bf16', 'no' ('fp32'), "
                             f'got {mixed_precision!r}')
        if recompute_granularity not in _RECOMPUTE:
            raise ValueError(f"MegatronModel: recompute_granularity must be 'full', 'selective' or None, "
                             f'got {recompute_granularity!r}')
        from .. import _global_mesh
        if device_mesh is not None and _global_mesh() is not None and device_mesh is not _global_mesh():
            raise ValueError('MegatronModel: device_mesh must be the mesh given to twinkle.initialize')
        opts = dict(kwargs)
        if opts.get('tensorboard_dir') is not None:
            opts['tensorboard_dir'] = os.fspath(opts['tensorboard_dir'])
        opts['load_weights'] = bool(load_weights)
        opts['mixed_precision'] = _MIXED_PRECISION[mixed_precision]
        opts.setdefault('moe_aux_loss_type', 'per_layer')  # Twinkle's Megatron backend (mcore's aux loss)
        opts['recompute_granularity'] = recompute_granularity or 'none'  # Twinkle's None = no recompute
        os.environ.setdefault('TOKENIZERS_PARALLELISM', 'true')
        self.model_id = model_id
        self.mixed_precision = mixed_precision
        self._m = _core.MegatronModel(str(model_id), opts)
        self.cur_step = 0
        self._lr = 1e-4

    # adapters ---------------------------------------------------------------------------------
    def add_adapter_to_model(self, adapter_name, config_or_dir, **kwargs):
        """Adds LoRA adapter `adapter_name` (one per model) to twinkle's C++ LoRA
        (model/lora_config.h: PEFT's y = W x + scaling B A x, sharded over tp as Megatron's
        LoRA layers); afterwards only the adapter trains and save() writes PEFT's layout
        (adapter_config.json, adapter_model.safetensors) unless merge_lora=True.

        config_or_dir: a LoraConfig (this package's, with PEFT's field names and defaults), a
        peft.LoraConfig, a dict of those fields, or a PEFT adapter directory (str: its config
        and weights are loaded). Fields as PEFT reads them: r, lora_alpha (scaling
        lora_alpha / r, / sqrt(r) with use_rslora), lora_dropout (MoE experts included),
        init_lora_weights (True: A kaiming-uniform, B zeros; 'gaussian'; False: B random too),
        target_modules: 'all-linear' (every linear layer but the lm head), a list of module
        names or suffixes ('q_proj', 'self_attn.o_proj'), a str other than 'all-linear' as a
        regular expression matched in full against the module names (PEFT's rule), or None
        (PEFT's default for Qwen3: ['q_proj', 'v_proj']). Fields twinkle does not implement
        (use_dora, bias other than 'none', fan_in_fan_out, exclude_modules, modules_to_save,
        layers_to_transform, layers_pattern, rank_pattern, alpha_pattern, inference_mode,
        other init_lora_weights) raise ValueError naming the field when set; task_type is
        informative. ValueError also for a bad value (the C++ text), a target that matches no
        module, a target that selects a module twinkle gives no adapter (PEFT matches every
        module name: the embedding and the lm head, which PEFT would wrap, or a norm, container or
        activation, which PEFT refuses too), or a second adapter; TypeError for an unknown field
        or keyword."""
        if kwargs:
            raise TypeError(f'add_adapter_to_model() got unexpected keyword arguments {sorted(kwargs)}')
        if isinstance(config_or_dir, (str, os.PathLike)):
            self._m.load_adapter(os.fspath(config_or_dir), str(adapter_name))
            return
        cfg = LoraConfig.from_any(config_or_dir)
        self._m.add_adapter_to_model(str(adapter_name),
                                     _lora_options(cfg, self._m.linear_modules(), self._m.other_modules()))

    @property
    def has_adapter(self):
        return self._m.has_adapter

    # optimizer / scheduler --------------------------------------------------------------------
    def set_optimizer(self, optimizer_cls='default', adapter_name=None, **kwargs):
        """Megatron's AdamW (Twinkle's names: falsy, 'default', 'MegatronOptimizer', 'Adam',
        plus 'AdamW'). Keywords (OptimizerConfig): lr=1e-4, weight_decay=0.01, adam_beta1=0.9,
        adam_beta2=0.999, adam_eps=1e-8, clip_grad=1.0, use_distributed_optimizer=True,
        bucket_bytes. ValueError (C++ text) for a bad value or name, TypeError for an unknown
        keyword."""
        self._m.set_optimizer(optimizer_cls or 'default', kwargs)
        self._lr = kwargs.get('lr', 1e-4)

    def set_lr_scheduler(self, scheduler_cls='default', adapter_name=None, **kwargs):
        """Megatron's OptimizerParamScheduler ('default' / 'OptimizerParamScheduler'):
        lr_warmup_steps=0, lr_decay_steps=0 (0 = constant after warm-up), min_lr=0, init_lr=0,
        lr_decay_style='cosine'; max_lr follows the optimizer's lr."""
        self._m.set_lr_scheduler(scheduler_cls or 'default', kwargs)

    # steps ------------------------------------------------------------------------------------
    def forward_backward(self, *, inputs, micro_batch_size=None, adapter_name=None, **kwargs):
        """inputs: a DataLoader batch (list of row dicts with input_ids and labels, lists or
        numpy arrays). Returns ModelOutput(loss=global per-token mean loss). Collective.
        A batch that does not convert raises ValueError / TypeError; in a job of several ranks the
        refusal reaches every rank (catching it leaves no rank waiting): the rank whose batch did
        not convert raises its ValueError / TypeError, the others RuntimeError with the same text."""
        self._check_step_kwargs('forward_backward', micro_batch_size, kwargs)
        loss = self._m.forward_backward(inputs)
        self.cur_step += 1
        return ModelOutput(loss=loss, logits=None)

    def forward_only(self, *, inputs, micro_batch_size=None, adapter_name=None, **kwargs):
        """Loss only (evaluation): ModelOutput(loss=...). Collective; refusals as forward_backward's."""
        self._check_step_kwargs('forward_only', micro_batch_size, kwargs)
        return ModelOutput(loss=self._m.forward_only(inputs), logits=None)

    def evaluate(self, dataloader, eval_iters=None):
        """The validation loss over a twinkle.dataloader.DataLoader as Megatron's evaluate computes it
        (megatron/training/training.py; the C++ twinkle/train/evaluate.h, `twinkle train --eval-iters`):
        forward_only on `eval_iters` batches (None: the rest of the loader's epoch, or a whole epoch when it
        is finished), the token losses and labelled tokens summed over the batches and the data-parallel
        ranks, loss = sum / tokens (the token-weighted mean, not the mean of the batch means). With
        eval_iters the loader is read on across its epoch end (Megatron's cyclic validation iterator) and
        keeps its position, so the next call continues where this one stopped. No gradient, optimizer or
        step counter changes. Collective. Returns {'loss', 'ppl' (exp(min(20, loss))), 'label_tokens',
        'iters'}; loss and ppl are None when no batch had a labelled token. ValueError when eval_iters < 1
        or the loader yields no batch."""
        import math
        if eval_iters is not None and (isinstance(eval_iters, bool) or not isinstance(eval_iters, int)
                                       or eval_iters < 1):
            raise ValueError(f'evaluate: eval_iters must be an int >= 1 or None, got {eval_iters!r}')
        total, tokens, iters = 0.0, 0, 0
        while eval_iters is None or iters < eval_iters:
            got = False
            for batch in dataloader:
                got = True
                self._m.forward_only(batch)
                total += self._m.last_eval_lm_loss_sum
                tokens += self._m.last_eval_label_tokens
                iters += 1
                if eval_iters is not None and iters >= eval_iters:
                    break
            if not got:
                raise ValueError('evaluate: the dataloader yields no batch')
            if eval_iters is None:
                break
        loss = total / tokens if tokens else None
        return {'loss': loss, 'ppl': math.exp(min(20.0, loss)) if tokens else None, 'label_tokens': tokens,
                'iters': iters}

    def _check_step_kwargs(self, call, micro_batch_size, kwargs):
        if micro_batch_size is not None:
            raise ValueError(f'{call}: pass micro_batch_size to MegatronModel(...) (it is fixed per model)')
        if kwargs.get('return_logits') or kwargs.get('disable_lora'):
            raise ValueError(f'{call}: return_logits / disable_lora are not supported')
        unknown = set(kwargs) - {'return_logits', 'disable_lora', 'temperature'}
        if unknown:
            raise TypeError(f'{call}() got unexpected keyword arguments {sorted(unknown)}')
        if kwargs.get('temperature', 1.0) != 1.0:
            raise ValueError(f'{call}: temperature other than 1.0 is not supported')

    def forward(self, *args, **kwargs):
        raise NotImplementedError('MegatronModel.forward: use forward_backward / forward_only (as Twinkle)')

    def calculate_loss(self, *args, **kwargs):
        raise NotImplementedError('MegatronModel.calculate_loss: use forward_backward (as Twinkle)')

    def backward(self, *args, **kwargs):
        raise NotImplementedError('MegatronModel.backward: use forward_backward (as Twinkle)')

    def clip_grad_and_step(self, max_grad_norm=None, norm_type=2, adapter_name=None, **kwargs):
        """Reduces gradients, clips to max_grad_norm (None = set_optimizer's clip_grad; <= 0
        disables), AdamW step, zero grads, scheduler step. Returns {'grad_norm' (pre-clip),
        'clip_coef', 'lr', 'step', 'skipped'}. Collective."""
        if norm_type != 2:
            raise ValueError(f'clip_grad_and_step: norm_type must be 2 (the L2 norm), got {norm_type!r}')
        if kwargs:
            raise TypeError(f'clip_grad_and_step() got unexpected keyword arguments {sorted(kwargs)}')
        return self._m.clip_grad_and_step(None if max_grad_norm is None else float(max_grad_norm))

    def calculate_metric(self, is_training=True, adapter_name=None):
        """Twinkle's metric dict (string values): loss, grad_norm, learning rate, iters, total
        time elapse, speed, plus tokens/s and MFU."""
        return dict(self._m.calculate_metric(bool(is_training)))

    def last_metrics(self):
        """Numeric metrics of the last step: step, loss, grad_norm, lr, tokens, tokens_per_s, mfu,
        peak_memory_bytes (this rank's peak: the device allocator's, or the CPU process's peak resident
        set), ..."""
        return self._m.last_metrics()

    @property
    def tensorboard_path(self):
        """The event file tensorboard_dir is written to ('' before the first step, on ranks other
        than 0, and without tensorboard_dir)."""
        return self._m.tensorboard_path

    def get_train_configs(self, adapter_name=None):
        return self._m.get_train_configs()

    # checkpoints ------------------------------------------------------------------------------
    def save(self, name=None, output_dir=None, interval=1, save_optimizer=False, merge_lora=False, **kwargs):
        """Hugging Face checkpoint (config.json, safetensors, tokenizer files) in
        (output_dir or 'output') / (name or 'checkpoint-step-<cur_step>'), written by rank 0
        (with an adapter: PEFT's adapter directory, or the merged full checkpoint with merge_lora);
        skipped (None) unless cur_step % interval == 0. Returns the directory. Collective.
        save_optimizer=True also writes the training state resume_from_checkpoint reads
        (trainer_state.json, iter_<step:07d>/: fp32 weights, AdamW moments, scheduler and step;
        layout-independent, written atomically; C++ MegatronModel::save); the keyword
        consumed_train_samples goes into trainer_state.json as in Twinkle. The keyword save_format
        ('sharded', the default, or 'gathered'; C++ SaveOptions::save_format) says how: 'sharded' has
        every rank write its own slices plus an index and no HF weights (`twinkle export
        --from-checkpoint DIR -o OUT` writes them), 'gathered' the HF weights and full state tensors
        gathered to rank 0.

        The keyword async_save=True (with save_optimizer=True and save_format 'sharded'; C++
        SaveOptions::async_save, `twinkle train --async-save`, Megatron's async_save) copies this
        rank's slices into a host staging buffer and returns while a background thread writes them;
        training goes on. The checkpoint appears (committed by rank 0) once every rank's write is done:
        checked after each clip_grad_and_step, waited for by the next save and by wait_for_save(),
        which a program must call before it ends (else that checkpoint is never committed). The
        returned directory exists only after that commit. Costs one copy of the rank's shards
        (`twinkle plan --async-save`)."""
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f'save: interval must be an int >= 1, got {interval!r}')
        consumed = kwargs.pop('consumed_train_samples', -1)
        save_format = kwargs.pop('save_format', 'sharded')
        if save_format not in ('sharded', 'gathered'):
            raise ValueError(f"save: save_format must be 'sharded' or 'gathered', got {save_format!r}")
        async_save = kwargs.pop('async_save', False)
        if not isinstance(async_save, bool):
            raise TypeError(f'save: async_save must be a bool, got {async_save!r}')
        if async_save and not (save_optimizer and save_format == 'sharded'):
            raise ValueError("save: async_save=True needs save_optimizer=True with save_format 'sharded' "
                             f"(got save_optimizer={save_optimizer!r}, save_format={save_format!r})")
        if kwargs:
            raise TypeError(f'save() got unexpected keyword arguments {sorted(kwargs)}')
        if self.cur_step % interval != 0:
            return None
        return self._m.save(name or f'checkpoint-step-{self.cur_step}', output_dir or 'output', bool(merge_lora),
                            bool(save_optimizer), int(consumed), save_format, async_save)

    def wait_for_save(self):
        """Finishes a pending save(..., async_save=True): waits for every rank's writer thread and
        commits the checkpoint (C++ MegatronModel::wait_for_save); does nothing without one.
        Collective. RuntimeError (on every rank, naming the file) when a rank's write failed; that
        checkpoint is then removed and earlier ones are untouched."""
        self._m.wait_for_save()

    @property
    def save_pending(self):
        """Whether a save(..., async_save=True) has not been committed yet (wait_for_save commits it)."""
        return self._m.save_pending

    def resume_from_checkpoint(self, checkpoint_dir, resume_only_model=False):
        """Twinkle's resume_from_checkpoint: loads a checkpoint written with save_optimizer=True
        (or an output dir whose 'latest' names one), saved on any layout: the fp32 weights and,
        unless resume_only_model, the AdamW state, scheduler position and cur_step. Call after
        set_optimizer / set_lr_scheduler. Returns {cur_step, consumed_train_samples,
        gradient_accumulation_steps} (pass consumed_train_samples to
        DataLoader.resume_from_checkpoint). Collective."""
        d = self._m.resume_from_checkpoint(str(checkpoint_dir), bool(resume_only_model))
        if not resume_only_model:
            self.cur_step = d['cur_step']
        return d

    def load(self, name, output_dir=None, load_optimizer=False, adapter_name=None, **kwargs):
        """Twinkle's load: the checkpoint directory output_dir / name (or name). Collective.

        load_optimizer=False: the weights of a Hugging Face checkpoint (config.json, safetensors).
        load_optimizer=True: the training state save(..., save_optimizer=True) wrote (a checkpoint
        directory, or an output dir whose 'latest' names one; saved on any layout): the fp32
        weights, the AdamW moments and step count, the scheduler position and cur_step, exactly
        as resume_from_checkpoint (C++ MegatronModel::resume_from_checkpoint); call it after
        set_optimizer / set_lr_scheduler, and move the DataLoader with
        resume_from_checkpoint(consumed_train_samples) as in Twinkle. A directory without that
        state (no trainer_state.json and no 'latest') loads the weights only with a warning, as
        Twinkle does when the Megatron tracker file is missing. Keyword no_load_optim=True
        (Megatron's) keeps the optimizer and scheduler as they are and loads the fp32 weights
        only. Returns the resume dict {cur_step, consumed_train_samples,
        gradient_accumulation_steps} with load_optimizer, else None. RuntimeError (the C++
        text) for a missing, truncated or mismatched checkpoint; TypeError for an unknown
        keyword."""
        no_load_optim = bool(kwargs.pop('no_load_optim', False))
        if kwargs:
            raise TypeError(f'load() got unexpected keyword arguments {sorted(kwargs)}')
        path = os.path.join(output_dir, name) if output_dir else name
        path = os.fspath(path)
        if load_optimizer:
            if os.path.exists(os.path.join(path, 'trainer_state.json')) or \
                    os.path.exists(os.path.join(path, 'latest')):
                return self.resume_from_checkpoint(path, resume_only_model=no_load_optim)
            from ..logger import get_logger
            get_logger().warning(f'load(load_optimizer=True): {path} holds no optimizer state (no '
                                 "trainer_state.json and no 'latest'; save with save_optimizer=True): loaded the "
                                 'weights only')
        self._m.load(path)
        return None
