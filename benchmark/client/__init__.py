"""The load: prompts, SGLang's benchmark client, probes, and the sweep and soak that drive servers with it."""
