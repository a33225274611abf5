"""Ray's JobConfig (ray.job_config.JobConfig): what a driver's job is started with, given to
troupe.init(job_config=...). troupe honours its namespace and its runtime_env (env_vars, as
init's runtime_env); metadata is kept and read back; an option troupe cannot honour warns
at init, as init's own do."""


class JobConfig:
    def __init__(self, jvm_options=None, code_search_path=None, runtime_env=None,
                 _client_job=False, metadata=None, ray_namespace=None,
                 default_actor_lifetime="non_detached", _py_driver_sys_path=None):
        if ray_namespace is not None and not isinstance(ray_namespace, str):
            raise TypeError(f"ray_namespace must be None or a str, got "
                            f"{type(ray_namespace).__name__}")
        if default_actor_lifetime not in ("detached", "non_detached"):
            raise ValueError("default_actor_lifetime must be 'detached' or 'non_detached', "
                             f"got {default_actor_lifetime!r}")
        self.ray_namespace = ray_namespace
        self.runtime_env = runtime_env
        self.metadata = dict(metadata or {})
        self.jvm_options = list(jvm_options or [])
        self.code_search_path = list(code_search_path or [])
        self.default_actor_lifetime = default_actor_lifetime
        self._py_driver_sys_path = list(_py_driver_sys_path or [])

    def set_metadata(self, key, value):
        self.metadata[key] = value

    def set_runtime_env(self, runtime_env, validate=False):
        self.runtime_env = runtime_env

    def set_ray_namespace(self, ray_namespace):
        self.ray_namespace = ray_namespace

    def set_default_actor_lifetime(self, default_actor_lifetime):
        if default_actor_lifetime not in ("detached", "non_detached"):
            raise ValueError("default_actor_lifetime must be 'detached' or 'non_detached'")
        self.default_actor_lifetime = default_actor_lifetime

    def _unhonoured(self):
        """The options given that troupe does not do (names, for init's warning)."""
        out = {}
        if self.jvm_options:
            out["jvm_options"] = self.jvm_options
        if self.code_search_path:
            out["code_search_path"] = self.code_search_path
        if self.default_actor_lifetime != "non_detached":
            out["default_actor_lifetime"] = self.default_actor_lifetime
        return out
