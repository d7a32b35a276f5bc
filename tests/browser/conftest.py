from tests.adversarial.conftest import anyio_backend, lab, lab_factory, need_criu  # noqa: F401
