"""Systems: one folder per family of anonymisation systems, and what every family shares.

* :mod:`.recipes`: the YAML recipes of ``recipes/systems/`` (and of each family's ``recipes/`` folder),
  command-line overrides, :func:`~.recipes.load_system_config`, :func:`~.recipes.build_system`, needs;
* :mod:`.registry`: the stage registry, filled from each family's ``STAGES`` table;
* :mod:`.stage`: the stage protocol (:class:`~.stage.Stage`, :class:`~.stage.Utterance`) and what several
  families' stages share;
* :mod:`.f0`: the F0 stage of the neural families; :mod:`.mcadams`: McAdams (B2, B2r);
* the families: ``ssl_sas/`` (the SSL-SAS chain: resynthesis, B1's pseudo-speaker, zLLR, TD-PSOLA),
  ``asrbn/`` (B5, B6), ``nac/`` (B4). A family imports no other family. docs/development.md, "Adding a
  system", lists the files a new one creates.

This table names the stages of the modules at this package's root; each family's ``__init__`` names its own.
"""

STAGES = {
    "f0": ".f0:F0Stage",
    "mcadams": ".mcadams:McAdamsStage",
}
