"""One module per dataset format (`--custom-dataset-type`), named for it; dag_jsonl's reader is
a package of its own."""
