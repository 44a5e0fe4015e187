"""Rule prefetch: every hub model and dataset of the config into HF_HOME (mialab.pipeline.prefetch), online."""

import os

# this rule alone goes online (set before huggingface_hub / datasets read them at import)
os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "0"

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0])  # noqa: F821

from mialab.core.io import write_json
from mialab.pipeline.prefetch import HubItem, prefetch

rows = prefetch([HubItem(**item) for item in snakemake.params.repositories])  # noqa: F821
write_json({"hf_home": os.environ.get("HF_HOME", "~/.cache/huggingface"),
            "hf_endpoint": os.environ.get("HF_ENDPOINT", "https://huggingface.co"), "items": rows},
           snakemake.output.manifest)  # noqa: F821
print(f"prefetched {len(rows)} hub repositories")
