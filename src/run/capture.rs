//! The capture records every writer of runs builds the same way: the sites of one capture step
//! gathered per storage point (layer, tensor class, part), each a histogram of the values before
//! rounding and the counts of rounding them, merged over every tensor added to it, and written
//! in layer order, then class order, then part; and the step's per-class counts from them.
//! `train` adds what its storage points observed, the PyTorch recorder what its hooks saw.

use std::collections::BTreeMap;

use super::{CAPTURE_SUB_BINS_LOG2, SiteCapture};
use crate::format::RoundCounts;
use crate::recipe::{Class, StoreCounts};
use crate::stats::Histogram;

/// The sites of one capture step, being gathered.
#[derive(Clone, Debug, Default)]
pub struct CaptureBuilder {
    layers: Vec<String>,
    sites: Vec<SiteCapture>,
}

impl CaptureBuilder {
    /// An empty capture whose sites are ordered by `layers` (others after them, by name).
    #[must_use]
    pub fn new(layers: Vec<String>) -> CaptureBuilder {
        CaptureBuilder {
            layers,
            sites: Vec::new(),
        }
    }

    /// The site (`layer`, `tensor`, `part`), empty when first asked for.
    pub fn site(&mut self, layer: &str, tensor: Class, part: Option<&str>) -> &mut SiteCapture {
        let at = match self
            .sites
            .iter()
            .position(|s| s.layer == layer && s.tensor == tensor && s.part.as_deref() == part)
        {
            Some(at) => at,
            None => {
                self.sites.push(SiteCapture {
                    layer: layer.to_string(),
                    tensor,
                    part: part.map(str::to_string),
                    values: Histogram::new(CAPTURE_SUB_BINS_LOG2),
                    rounding: RoundCounts::default(),
                    rounded_into: None,
                });
                self.sites.len() - 1
            }
        };
        &mut self.sites[at]
    }

    /// Merges `values` (a capture histogram) and the counts of rounding them into the site.
    pub fn add(
        &mut self,
        layer: &str,
        tensor: Class,
        part: Option<&str>,
        values: &Histogram,
        rounding: RoundCounts,
    ) {
        let site = self.site(layer, tensor, part);
        site.values.merge(values);
        site.rounding += rounding;
    }

    /// Merges `sites` (another capture of the same step: another rank's) into this one, site by
    /// site: the histograms' counts and the rounding counts add, amax is the larger and the
    /// smallest nonzero magnitude the smaller ([`Histogram::merge`]), so that the merge of the
    /// captures of disjoint parts of a tensor counts exactly what a capture of the whole does.
    /// The sums of magnitudes and squares add in f64: equal to the whole's up to reassociation
    /// (exactly, where every partial sum is representable). A site's `rounded_into` is kept, or
    /// taken from `sites` where this capture has none.
    ///
    /// # Panics
    /// If a histogram of `sites` has other sub-bins than the capture's
    /// ([`CAPTURE_SUB_BINS_LOG2`]).
    pub fn merge<'a>(&mut self, sites: impl IntoIterator<Item = &'a SiteCapture>) {
        for s in sites {
            let site = self.site(&s.layer, s.tensor, s.part.as_deref());
            site.values.merge(&s.values);
            site.rounding += s.rounding;
            site.rounded_into = site.rounded_into.or(s.rounded_into);
        }
    }

    /// The sites in record order: layer (the order of the layers given, others after them by
    /// name), then class, then part (none first).
    #[must_use]
    pub fn sites(&self) -> Vec<SiteCapture> {
        let rank = |s: &SiteCapture| {
            (
                self.layers
                    .iter()
                    .position(|l| *l == s.layer)
                    .unwrap_or(usize::MAX),
                s.layer.clone(),
                s.tensor.index(),
                s.part.clone(),
            )
        };
        let mut sites = self.sites.clone();
        sites.sort_by_cached_key(rank);
        sites
    }

    /// [`CaptureBuilder::sites`], leaving the builder empty for the next capture step.
    pub fn take(&mut self) -> Vec<SiteCapture> {
        let sites = self.sites();
        self.sites.clear();
        sites
    }
}

/// Per tensor class, summed over a capture's sites: what each class stored and what rounding
/// did to it (a step's `counts`, for a writer that sees only its capture steps).
#[must_use]
pub fn class_counts(sites: &[SiteCapture]) -> BTreeMap<Class, StoreCounts> {
    let mut counts: BTreeMap<Class, StoreCounts> = BTreeMap::new();
    for s in sites {
        let c = counts.entry(s.tensor).or_default();
        c.stored += s.values.count();
        c.underflow += s.rounding.underflow;
        c.subnormal += s.rounding.subnormal;
        c.overflow += s.rounding.overflow;
        c.nonfinite += s.values.nonfinite();
    }
    counts
}

#[cfg(test)]
mod tests;
