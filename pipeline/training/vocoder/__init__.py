"""HiFi-GAN vocoder training for SSL-SAS-layout model sets (``voxanon train vocoder``): the run in
:mod:`.run`, its settings, features, data order, trainer and export in their own modules."""
