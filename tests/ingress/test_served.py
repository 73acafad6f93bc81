"""Reading who served a reply: hidden params, LiteLLM headers (mapping or raw), the one author rule."""

from __future__ import annotations

from handoffmon.attribution.names import ModelNames
from handoffmon.ingress import (
    ChunkFolder,
    ServedBy,
    author,
    describe_response,
    describe_stream,
    reply_message,
    served_by_headers,
    served_by_response,
    usage_of,
)


class _Resp:
    def __init__(self, hidden: dict[str, object]) -> None:
        self._hidden_params = hidden
        self.model = "gpt-x-2024"
        self.choices = [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}]
        self.usage = {"prompt_tokens": 5, "completion_tokens": 2}
        self.id = "chatcmpl-9"


def test_hidden_params_and_additional_headers() -> None:
    """model_id / litellm_model_name / attempted counts are read; header names are case-insensitive."""
    r = _Resp(
        {
            "model_id": "dep-9",
            "litellm_model_name": "azure/gpt-x",
            "custom_llm_provider": "azure",
            "additional_headers": {"X-LiteLLM-Attempted-Fallbacks": "2", "x-litellm-attempted-retries": 3},
        }
    )
    s = served_by_response(r)
    assert (s.deployment_id, s.model_name, s.fallbacks, s.retries, s.provider) == (
        "dep-9",
        "azure/gpt-x",
        2,
        3,
        "azure",
    )
    assert s.response_model == "gpt-x-2024"
    assert usage_of(r) == (5, 2, "length", "chatcmpl-9")
    assert reply_message(r) == {"role": "assistant", "content": "hi"}


def test_headers_and_garbage_values() -> None:
    """Proxy headers parse; non-numeric counts become 0 and 'None' strings mean absent."""
    s = served_by_headers(
        {"X-LiteLLM-Model-Id": "None", "x-litellm-model-name": "m", "x-litellm-attempted-fallbacks": "x"}
    )
    assert (s.deployment_id, s.model_name, s.fallbacks) == (None, "m", 0)
    assert served_by_response(object()).deployment_id is None


def test_raw_asgi_headers_are_read_case_insensitively() -> None:
    """serve hands raw (bytes) header pairs: the same fields, any case; junk counts become 0."""
    raw = [
        (b"X-LiteLLM-Model-Id", b"dep-7"),
        (b"x-litellm-model-name", b"azure/gpt-4o"),
        (b"x-litellm-attempted-fallbacks", b"2"),
        (b"x-litellm-attempted-retries", b"nope"),
        (b"content-type", b"application/json"),
    ]
    assert served_by_headers(raw) == ServedBy("dep-7", "azure/gpt-4o", None, 2, 0)


def test_author_rule_is_one_order() -> None:
    """Mapped deployment id, then the deployment's model string, then the id, then the reported model."""
    names = ModelNames({"dep-1": "eu-gpt"})
    assert author(names, "dep-1", "openai/gpt-4o", "gpt-4o-2024") == "dep-1"
    assert author(names, "dep-2", "openai/gpt-4o", "gpt-4o-2024") == "openai/gpt-4o"
    assert author(names, "dep-2", None, "gpt-4o-2024") == "dep-2"
    assert author(names, None, None, "gpt-4o-2024") == "gpt-4o-2024"
    assert author(names, None, None) is None


def test_describe_response_reads_usage_id_and_author() -> None:
    """A JSON completion (serve) and an SDK-like object give the same Outcome fields."""
    names = ModelNames()
    doc = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-2024",
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": "4"},
    }
    out = describe_response(names, doc, served_by_headers({"x-litellm-model-name": "openai/gpt-4o"}))
    assert out.authors == ("openai/gpt-4o",) and out.response_model == "gpt-4o-2024"
    assert (out.input_tokens, out.output_tokens, out.finish_reason, out.response_id) == (
        3,
        None,
        "stop",
        "chatcmpl-1",
    )
    assert describe_response(names, doc, served_by_headers({})).authors == ("gpt-4o-2024",)


def test_describe_stream_gives_one_author_per_deployment_that_wrote() -> None:
    """A mid-stream fallback: the deployments named by the chunks, each resolved to its model."""
    folder = ChunkFolder()
    for dep, text in (("dep-a", "first "), ("dep-b", "second")):
        folder.feed(
            {"choices": [{"index": 0, "delta": {"content": text}}], "_hidden_params": {"model_id": dep}}
        )
    served = ServedBy(deployment_id="dep-b", fallbacks=1)
    models = {"dep-a": "openai/a", "dep-b": "openai/b"}
    out = describe_stream(ModelNames(), folder.outcome(completed=True), served, models.get)
    assert (out.authors, out.deployment_id, out.fallbacks) == (("openai/a", "openai/b"), "dep-b", 1)


def test_raw_byte_header_names_match_like_their_decoded_lower_case() -> None:
    """Raw names are matched as latin-1 text lowered: the same answer as str pairs, and a
    non-ASCII letter that lowers to itself or another non-ASCII letter never matches."""
    names = [
        b"X-LITELLM-MODEL-GROUP",
        b"x-litellm-model-\xc9d",
        b"x-litellm-model-id\xa0",
        b"X-LiteLLM-Model-Id",
    ]
    raw = [(n, f"v{i}".encode()) for i, n in enumerate(names)]
    decoded = [(n.decode("latin-1"), v) for n, v in raw]
    assert served_by_headers(raw) == served_by_headers(decoded)
    assert served_by_headers(raw) == ServedBy("v3", None, "v0", 0, 0)


def test_served_strings_none_and_empty_mean_absent() -> None:
    """'None' and '' are absent for str values, bytes are decoded, other values become str."""
    s = served_by_headers(
        {"x-litellm-model-id": "", "x-litellm-model-name": "None", "x-litellm-model-group": 7}
    )
    assert (s.deployment_id, s.model_name, s.model_group) == (None, None, "7")
    assert served_by_headers([(b"x-litellm-model-id", b"dep")]).deployment_id == "dep"


def test_after_fallbacks_names_the_model_the_attempted_fallbacks_index_points_at() -> None:
    """The LiteLLM SDK's own fallbacks: the header's index into (model, *fallbacks) names the
    author instead of the first attempt's stale name; a dict fallback names its ``model`` (or
    the call's); a Router's response (a deployment), a first-try answer and an index past the
    list keep what they said, except that the stale name is dropped for the last."""
    from handoffmon.ingress.served import ServedBy, after_fallbacks

    stale = ServedBy(model_name="openai/dead", fallbacks=2, response_model="m-c")
    tried = ("openai/dead", "openai/m-b", "openai/m-c")
    assert after_fallbacks(stale, tried).model_name == "openai/m-c"
    assert after_fallbacks(stale, ("openai/dead", "x", {"model": "openai/m-d"})).model_name == "openai/m-d"
    assert after_fallbacks(stale, ("openai/dead", "x", {"api_key": "k"})).model_name == "openai/dead"
    routed = stale._replace(deployment_id="dep-1")
    assert after_fallbacks(routed, tried) == routed
    assert after_fallbacks(stale._replace(fallbacks=0), tried) == stale._replace(fallbacks=0)
    assert after_fallbacks(stale._replace(fallbacks=5), tried).model_name is None
