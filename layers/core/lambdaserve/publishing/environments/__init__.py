"""Model environments: a version's own Python packages, built once at publish and stored in
the bucket by digest. Its requirements file read as untrusted input, the image's pins, the
digest (``requirements``); the pins and Python of the image that serves, as the sandbox
reports them (``serving_target``); environments reused or built (``store``); the sandbox
that builds them, a credential-less child or the code-validator function (``builders``);
the build itself, wheels only, packed (``build``); pip's failures as reasons
(``pip_reasons``); Triton's conda-pack tarballs (``conda``).

Where it serves, a version's environment is unpacked by ``serving.residency.environments`` (the
serving side: below publishing, beside the file cache it reads from), and the workers put it
on ``sys.path`` through ``workers.options.EnvironmentPaths``.
"""
