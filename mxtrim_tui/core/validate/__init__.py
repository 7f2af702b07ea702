"""The validation stage: prove an output directory in the environment that will run it.

- ``probe/offline_probe.py`` (run in the target interpreter): versions, import origins, config /
  tokenizer / chat template / processor loaded offline, architecture registered in vLLM.
- ``serve`` — the `vllm serve` command for an output, the server process and its shutdown.
- ``requests`` — the HTTP requests sent to a healthy server (models, completion, chat).
- ``classify`` — failure classes from exit status and log evidence.
- ``run`` — one validation: rows passed / failed / unverified.
- ``record`` — ``validation.json`` (appended) and the README's Validation section.

Importable without Textual; the CLI and the wizard only subscribe to its events.
"""
