"""Test-only reference for B3's target speakers, transcribed (not imported) from the VoicePrivacy 2024 recipe
(Voice-Privacy-Challenge-2024, from DigitalPhonetics/speaker-anonymization; GPL-3.0), under
``anonymization/modules/sttts/speaker_embeddings/anonymization/``:

- ``utils/WGAN/resnet_1.py``: ``ResNet_G``, ``ResNet_D``, ``ResNetBlock`` whole;
- ``utils/WGAN/init_wgan.py``: ``init_resnet`` and its weight initialisers, and ``create_wgan``'s Adam optimizers;
- ``utils/WGAN/wgan_qc.py``: ``WassersteinGanQuadraticCost.sample_generator`` and ``save_model_checkpoint`` as
  functions of the generator (and of the critic and optimizers), the networks wrapped in ``nn.DataParallel`` as
  its constructor wraps them (its linear-programming training step, which needs cvxopt, left out);
- ``utils/WGAN/embeddings_generator.py``: ``EmbeddingsGenerator`` (loading and ``generate_embeddings``);
- ``gan_anon.py``: ``GANAnonymizer._select_gan_vector`` and ``_reset_unused_indices`` as one loop over the
  utterances (``anonymize_embeddings`` without its logging and bookkeeping).

Only this module's tests use it; it is never shipped in voxanon's packages.
"""
import os

import numpy as np
import torch
import torch.utils.data
from scipy.spatial.distance import cosine
from torch import nn


# ---- utils/WGAN/resnet_1.py ----

class ResNet_G(nn.Module):

    def __init__(self, data_dim, z_dim, size, nfilter=64, nfilter_max=512, bn=True, res_ratio=0.1, **kwargs):
        super().__init__()
        self.input_dim = z_dim
        self.output_dim = z_dim
        self.dropout_rate = 0

        s0 = self.s0 = 4
        nf = self.nf = nfilter
        nf_max = self.nf_max = nfilter_max
        self.bn = bn
        self.z_dim = z_dim

        # Submodules
        nlayers = int(np.log2(size / s0))
        self.nf0 = min(nf_max, nf * 2 ** (nlayers + 1))

        self.fc = nn.Linear(z_dim, self.nf0 * s0 * s0)
        if self.bn:
            self.bn1d = nn.BatchNorm1d(self.nf0 * s0 * s0)
        self.relu = nn.LeakyReLU(0.2, inplace=True)

        blocks = []
        for i in range(nlayers, 0, -1):
            nf0 = min(nf * 2 ** (i + 1), nf_max)
            nf1 = min(nf * 2 ** i, nf_max)
            blocks += [
                ResNetBlock(nf0, nf1, bn=self.bn, res_ratio=res_ratio),
                nn.Upsample(scale_factor=2)
                ]

        nf0 = min(nf * 2, nf_max)
        nf1 = min(nf, nf_max)
        blocks += [
            ResNetBlock(nf0, nf1, bn=self.bn, res_ratio=res_ratio),
            ResNetBlock(nf1, nf1, bn=self.bn, res_ratio=res_ratio)
            ]

        self.resnet = nn.Sequential(*blocks)
        self.conv_img = nn.Conv2d(nf, 3, 3, padding=1)

        self.fc_out = nn.Linear(3 * size * size, data_dim)

    def forward(self, z, return_intermediate=False):
        batch_size = z.size(0)
        out = self.fc(z)
        if self.bn:
            out = self.bn1d(out)
        out = self.relu(out)
        if return_intermediate:
            l_1 = out.detach().clone()
        out = out.view(batch_size, self.nf0, self.s0, self.s0)

        out = self.resnet(out)

        out = self.conv_img(out)
        out = self.relu(out)
        out.flatten(1)
        out = self.fc_out(out.flatten(1))

        if return_intermediate:
            return out, l_1
        return out

    def sample_latent(self, n_samples, z_size):
        return torch.randn((n_samples, z_size))


class ResNet_D(nn.Module):

    def __init__(self, data_dim, size, nfilter=64, nfilter_max=512, res_ratio=0.1):
        super().__init__()
        s0 = self.s0 = 4
        nf = self.nf = nfilter
        nf_max = self.nf_max = nfilter_max
        self.size = size

        # Submodules
        nlayers = int(np.log2(size / s0))
        self.nf0 = min(nf_max, nf * 2 ** nlayers)

        nf0 = min(nf, nf_max)
        nf1 = min(nf * 2, nf_max)
        blocks = [
            ResNetBlock(nf0, nf0, bn=False, res_ratio=res_ratio),
            ResNetBlock(nf0, nf1, bn=False, res_ratio=res_ratio)
            ]

        self.fc_input = nn.Linear(data_dim, 3 * size * size)

        for i in range(1, nlayers + 1):
            nf0 = min(nf * 2 ** i, nf_max)
            nf1 = min(nf * 2 ** (i + 1), nf_max)
            blocks += [
                nn.AvgPool2d(3, stride=2, padding=1),
                ResNetBlock(nf0, nf1, bn=False, res_ratio=res_ratio),
                ]

        self.conv_img = nn.Conv2d(3, 1 * nf, 3, padding=1)
        self.relu = nn.LeakyReLU(0.2, inplace=True)
        self.resnet = nn.Sequential(*blocks)

        self.fc = nn.Linear(self.nf0 * s0 * s0, 1)

    def forward(self, x):
        batch_size = x.size(0)

        out = self.fc_input(x)
        out = self.relu(out).view(batch_size, 3, self.size, self.size)

        out = self.relu((self.conv_img(out)))
        out = self.resnet(out)
        out = out.view(batch_size, self.nf0 * self.s0 * self.s0)
        out = self.fc(out)

        return out


class ResNetBlock(nn.Module):

    def __init__(self, fin, fout, fhidden=None, bn=True, res_ratio=0.1):
        super().__init__()
        # Attributes
        self.bn = bn
        self.is_bias = not bn
        self.learned_shortcut = (fin != fout)
        self.fin = fin
        self.fout = fout
        if fhidden is None:
            self.fhidden = min(fin, fout)
        else:
            self.fhidden = fhidden
        self.res_ratio = res_ratio

        # Submodules
        self.conv_0 = nn.Conv2d(self.fin, self.fhidden, 3, stride=1, padding=1, bias=self.is_bias)
        if self.bn:
            self.bn2d_0 = nn.BatchNorm2d(self.fhidden)
        self.conv_1 = nn.Conv2d(self.fhidden, self.fout, 3, stride=1, padding=1, bias=self.is_bias)
        if self.bn:
            self.bn2d_1 = nn.BatchNorm2d(self.fout)
        if self.learned_shortcut:
            self.conv_s = nn.Conv2d(self.fin, self.fout, 1, stride=1, padding=0, bias=False)
            if self.bn:
                self.bn2d_s = nn.BatchNorm2d(self.fout)
        self.relu = nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x):
        x_s = self._shortcut(x)
        dx = self.conv_0(x)
        if self.bn:
            dx = self.bn2d_0(dx)
        dx = self.relu(dx)
        dx = self.conv_1(dx)
        if self.bn:
            dx = self.bn2d_1(dx)
        out = self.relu(x_s + self.res_ratio * dx)
        return out

    def _shortcut(self, x):
        if self.learned_shortcut:
            x_s = self.conv_s(x)
            if self.bn:
                x_s = self.bn2d_s(x_s)
        else:
            x_s = x
        return x_s


# ---- utils/WGAN/init_wgan.py ----

def init_resnet(parameters):
    critic = ResNet_D(parameters['data_dim'][-1], parameters['size'], nfilter=parameters['nfilter'],
                      nfilter_max=parameters['nfilter_max'])
    generator = ResNet_G(parameters['data_dim'][-1], parameters['z_dim'], parameters['size'],
                         nfilter=parameters['nfilter'], nfilter_max=parameters['nfilter_max'])

    generator.apply(weights_init_G)
    critic.apply(weights_init_D)

    return generator, critic


def weights_init_D(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='leaky_relu')
    elif classname.find('BatchNorm') != -1:
        nn.init.constant_(m.weight, 1)
        nn.init.constant_(m.bias, 0)


def weights_init_G(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.kaiming_normal_(m.weight, mode='fan_in', nonlinearity='leaky_relu')
    elif classname.find('BatchNorm') != -1:
        nn.init.constant_(m.weight, 1)
        nn.init.constant_(m.bias, 0)


def create_optimizers(generator, discriminator, parameters):
    """``create_wgan``'s optimizer='adam' branch."""
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=parameters['learning_rate'], betas=parameters['betas'])
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=parameters['learning_rate'], betas=parameters['betas'])
    return optimizer_g, optimizer_d


# ---- utils/WGAN/wgan_qc.py (WassersteinGanQuadraticCost) ----

def sample_generator(G, num_samples, device, nograd=False, return_intermediate=False):
    G.eval()
    if isinstance(G, torch.nn.parallel.DataParallel):
        latent_samples = G.module.sample_latent(num_samples, G.module.z_dim)
    else:
        latent_samples = G.sample_latent(num_samples, G.z_dim)
    latent_samples = latent_samples.to(device)
    if nograd:
        with torch.no_grad():
            generated_data = G(latent_samples, return_intermediate=return_intermediate)
    else:
        generated_data = G(latent_samples)
    G.train()
    if return_intermediate:
        return generated_data[0].detach(), generated_data[1], latent_samples
    return generated_data.detach()


def save_model_checkpoint(G, D, G_opt, D_opt, num_steps, model_path, model_parameters, timestampStr, dataset_mean,
                          dataset_std):
    name = '%s_%s' % (timestampStr, 'wgan')
    model_filename = os.path.join(model_path, name)
    torch.save({
        'generator_state_dict': G.state_dict(),
        'critic_state_dict': D.state_dict(),
        'gen_optimizer_state_dict': G_opt.state_dict(),
        'critic_optimizer_state_dict': D_opt.state_dict(),
        'model_parameters': model_parameters,
        'iterations': num_steps,
        'mean': dataset_mean,
        'std': dataset_std
        }, model_filename)
    return model_filename


# ---- utils/WGAN/embeddings_generator.py ----

class EmbeddingsGenerator:

    def __init__(self, gan_path, device):
        self.device = device
        self.gan_path = gan_path

        self.mean = None
        self.std = None
        self.wgan = None

        self._load_model(self.gan_path)

    def generate_embeddings(self, n=1000):
        generated_samples = sample_generator(self.G, num_samples=n, device=self.device, nograd=True,
                                             return_intermediate=False).cpu()
        return self._inverse_normalize(generated_samples)

    def _load_model(self, path):
        gan_checkpoint = torch.load(path, map_location="cpu")

        # create_wgan: the networks of init_resnet, wrapped as WassersteinGanQuadraticCost wraps them
        generator, critic = init_resnet(gan_checkpoint['model_parameters'])
        self.G = nn.DataParallel(generator.to(self.device))
        self.D = nn.DataParallel(critic.to(self.device))
        self.G.load_state_dict(gan_checkpoint['generator_state_dict'])
        self.D.load_state_dict(gan_checkpoint['critic_state_dict'])

        self.mean = gan_checkpoint['mean']
        self.std = gan_checkpoint['std']

    def _inverse_normalize(self, tensor):
        return tensor * self.std + self.mean


# ---- gan_anon.py (GANAnonymizer) ----

def select_gan_vectors(speaker_vectors, gan_vectors, sim_threshold=0.7):
    """``_select_gan_vector`` for each speaker vector in order, the unused indices starting full; returns the
    chosen indices (``anonymize_embeddings`` keeps ``gan_vectors[idx]``)."""
    unused_indices = np.arange(len(gan_vectors))
    chosen = []
    for spk_vec in speaker_vectors:
        i = 0
        limit = 20
        while i < limit:
            if len(unused_indices) == 0:
                unused_indices = np.arange(len(gan_vectors))
            idx = np.random.choice(unused_indices)
            anon_vec = gan_vectors[idx]
            sim = 1 - cosine(spk_vec.cpu().numpy(), anon_vec.cpu().numpy())
            if sim < sim_threshold:
                break
            i += 1
        unused_indices = unused_indices[unused_indices != idx]
        chosen.append(int(idx))
    return chosen
