"""The server's routes, grouped by kind: `common` (every model), `embedding`, `sparse`,
`reranking`, `multivector` (ColBERT, BGE-M3), `tasks` (/predict), `search` (the loaded
indexes) and `root` (TEI's ``/``,
``/invocations``, ``/ping``). Each module holds one `APIRouter` whose handlers read the app's
`state.ServeState` and stay short: admission lives in `admission`, the model's side in
`adapters`."""

from .common import router as common
from .embedding import router as embedding
from .multivector import router as multivector
from .reranking import router as reranking
from .root import router as root
from .search import router as search
from .sparse import router as sparse
from .tasks import router as tasks

ROUTERS = (common, embedding, sparse, reranking, multivector, tasks, search, root)

__all__ = ["ROUTERS"]
