import os
import sys
from pathlib import Path

# the session runs at pterun's defaults: no packed-weight cache (pterun.delegates.xnnpack.litert_engine.cache),
# whatever the developer's shell asks for; tests that use the cache give it a directory of their own
for _name in ("PTERUN_CACHE_DIR", "PTERUN_NO_CACHE", "PTERUN_CACHE_MAX_MB"):
    os.environ.pop(_name, None)

sys.path.insert(0, str(Path(__file__).parent))
