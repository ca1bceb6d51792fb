"""twinkle.preprocessor (Twinkle's src/twinkle/preprocessor/llm.py) over twinkle::Preprocessor:
each maps a raw row to a 'messages' column (other columns kept)."""
from .. import _core

__all__ = ['SelfCognitionProcessor', 'MessagesPreprocessor', 'AlpacaPreprocessor']


class SelfCognitionProcessor(_core.SelfCognitionProcessor):
    """Replaces {{NAME}} / {{AUTHOR}} in query and response (same names for zh and en rows),
    messages = [system, user query, assistant response]."""

    def __init__(self, model_name=None, model_author=None, system='You are a helpful assistant.'):
        super().__init__('twinkle robot' if model_name is None else str(model_name),
                         'twinkle lab' if model_author is None else str(model_author), str(system))


class MessagesPreprocessor(_core.MessagesPreprocessor):
    """Rows already in chat form ('messages' OpenAI style or 'conversations' ShareGPT style)."""

    def __init__(self, default_system=None):
        super().__init__(default_system or '')


class AlpacaPreprocessor(_core.AlpacaPreprocessor):
    """Alpaca rows: instruction (+ input), output, optional system."""

    def __init__(self, default_system=None):
        super().__init__(default_system or '')
