from tests.adversarial.conftest import anyio_backend, lab, lab_factory  # noqa: F401
from tests.service.conftest import need_criu  # noqa: F401
