"""LoraConfig with PEFT's field names and defaults (peft/tuners/lora/config.py), since peft is
not a dependency. MegatronModel.add_adapter_to_model accepts this class, a peft.LoraConfig
object or a dict with these keys."""
import dataclasses
from dataclasses import dataclass, field
from typing import Any, List, Optional, Union


@dataclass
class LoraConfig:
    r: int = 8
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    target_modules: Optional[Union[List[str], str]] = None
    exclude_modules: Optional[Union[List[str], str]] = None
    bias: str = 'none'
    fan_in_fan_out: bool = False
    use_rslora: bool = False
    use_dora: bool = False
    modules_to_save: Optional[List[str]] = None
    init_lora_weights: Union[bool, str] = True
    layers_to_transform: Optional[Union[List[int], int]] = None
    layers_pattern: Optional[Union[List[str], str]] = None
    rank_pattern: dict = field(default_factory=dict)
    alpha_pattern: dict = field(default_factory=dict)
    task_type: Optional[str] = None
    inference_mode: bool = False
    # PEFT fields twinkle refuses when set (model/__init__.py _LORA_UNSUPPORTED); present so that a
    # peft.LoraConfig carrying them is refused by name instead of having them dropped on conversion
    lora_bias: bool = False
    trainable_token_indices: Optional[Any] = None
    layer_replication: Optional[List[Any]] = None
    target_parameters: Optional[List[str]] = None

    def __post_init__(self):
        if not isinstance(self.r, int) or self.r <= 0:
            raise ValueError(f'LoraConfig: r must be a positive int, got {self.r!r}')
        if self.lora_dropout < 0 or self.lora_dropout >= 1:
            raise ValueError(f'LoraConfig: lora_dropout must lie in [0, 1), got {self.lora_dropout!r}')
        if self.bias not in ('none', 'all', 'lora_only'):
            raise ValueError(f"LoraConfig: bias must be 'none', 'all' or 'lora_only', got {self.bias!r}")

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_any(cls, config: Any) -> 'LoraConfig':
        """A LoraConfig from this class, a peft.LoraConfig (any object with these attributes) or
        a dict. Unknown dict keys raise TypeError naming them."""
        if isinstance(config, cls):
            return config
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(config, dict):
            unknown = sorted(set(config) - set(names))
            if unknown:
                raise TypeError(f'LoraConfig: unknown field(s) {unknown}')
            return cls(**config)
        if hasattr(config, 'r') and hasattr(config, 'lora_alpha'):
            return cls(**{n: getattr(config, n) for n in names if hasattr(config, n)})
        raise TypeError(f'expected a LoraConfig, a peft LoraConfig or a dict, got {type(config).__name__}')
