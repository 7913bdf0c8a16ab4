# Every process that runs this package's Beam code reuses one S3 client per option set instead
# of Beam's one per operation (labse_common.filesystems.install_s3_client_cache). A worker has
# imported Beam before it unpickles the DoFns (and so imports this package); the launcher
# installs it in pipelines.options.pipeline_options. Commands that never touch Beam skip it.
def _install_s3_client_cache() -> None:
    import sys

    if "apache_beam" in sys.modules:
        from labse_common.filesystems import install_s3_client_cache

        install_s3_client_cache()


_install_s3_client_cache()
