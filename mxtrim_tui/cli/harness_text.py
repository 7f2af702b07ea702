"""The lines that say which batched_test harness entries were appended to a model YAML
(`trim --batched-test-config`, `batched-test-entry`)."""


def print_harness_text(appended: dict) -> None:
    """``appended``: what core.write.batched_test_entry.append_entries did, as JSON."""
    names = ", ".join(repr(n) for n in appended["appended"])
    if names:
        config = appended["config"]
        print(f"batched_test: created {config} with {names}:" if appended["created"] else f"batched_test: {names} appended to {config}:")
        print(appended["text"], end="")
        for said in appended.get("model_paths_said", []):  # which folder model_path assumes
            print(f"batched_test: {said}")
    if appended["already_present"]:
        print(f"batched_test: already in {appended['config']} (left as they are): {', '.join(appended['already_present'])}")
