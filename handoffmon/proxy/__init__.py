"""``handoffmon serve``: an OpenAI-compatible monitoring proxy (import ``handoffmon.proxy.app``)."""
