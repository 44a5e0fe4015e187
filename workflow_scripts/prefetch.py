"""Rule prefetch: every hub model, hub dataset and file of the config into HF_HOME and the data cache
(mialab.pipeline.prefetch), online; the revisions it resolved into the config's lock file (mialab.pipeline.lock)."""

import os

# this rule alone goes online (set before huggingface_hub / datasets read them at import)
os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "0"

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0])  # noqa: F821

from pathlib import Path

from mialab.core.io import write_json
from mialab.data.sources import data_cache
from mialab.pipeline.lock import write_lock
from mialab.pipeline.prefetch import HubItem, fetch_files, prefetch

params = snakemake.params  # noqa: F821
items = [HubItem(**item) for item in params.repositories]
rows = prefetch(items)
files = fetch_files([(key, source) for key, source in params.files])
for kind, section in (("dataset", "datasets"), ("model", "models")):   # a snapshot folder is named by its commit
    resolved = {row["repo_id"]: Path(row["fetched"]).name for row in rows
                if row["repo_type"] == kind and not row["revision"]}
    if resolved:
        write_lock(Path(params.lock), resolved, params.config, section)
        print(f"wrote the revisions of {len(resolved)} hub {kind}(s) into {params.lock}: commit it with the config")
write_json({"hf_home": os.environ.get("HF_HOME", "~/.cache/huggingface"),
            "hf_endpoint": os.environ.get("HF_ENDPOINT", "https://huggingface.co"), "data_cache": str(data_cache()),
            "lock": params.lock, "items": rows, "files": files}, snakemake.output.manifest)  # noqa: F821
print(f"prefetched {len(rows)} hub repositories and {len(files)} files")
