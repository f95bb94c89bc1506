"""``pipelinecache://``: Hydra parses each config file of ``conf/`` (and Hydra's own
``pkg://hydra.conf``) once a process, not once a job.

Hydra composes every job of a sweep from its files: each composition opens, parses (yaml)
and converts (``OmegaConf.create``) every file the job's defaults name, about a fifth of a
composition's time. :class:`config_cache.CachedConfigSource` is a Hydra ``ConfigSource`` that
wraps the file or package source Hydra would use and keeps each file's parse while the
file's bytes stay the same (an edited file is parsed again); every load returns a fresh
copy, since Hydra edits what it is given. :class:`config_cache.ConfigCacheSearchPath`, a
``SearchPathPlugin``, puts it in place of the ``file://`` and ``pkg://`` entries of the
search path. Both through Hydra's public plugin API, found by the plugin scan of the
``hydra_plugins`` namespace (docs/sweeps.md, "Sweepers").
"""
