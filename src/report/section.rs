//! The sections of every report page: each one's number, anchor and title in one place, so that
//! a heading, a figure's place and a sentence that says "see section 6" cannot disagree.

/// A section of a report page. The run page, analyze's page, the grid page and the plan page
/// number theirs; the plan's findings and the replay page's one section are not numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// The run page's findings.
    Findings,
    /// The run page's loss, metric and loss-scale curves.
    Curves,
    /// The run page's table of runs.
    Runs,
    /// The run page's information lost and preserved (rounding outcomes, underflow per layer).
    Information,
    /// The run page's Figure 3 of the paper: activation gradients against the format.
    Figure3,
    /// The run page's loss-scale window over training.
    Window,
    /// The run page's swamping.
    Swamping,
    /// The run page's non-finite events.
    Nonfinite,
    /// Analyze's recommendation.
    Recommendation,
    /// Analyze's table of each tensor's window.
    Tensors,
    /// Analyze's figures.
    AnalyzeFigures,
    /// The grid page's findings.
    GridFindings,
    /// The grid page's figures.
    GridFigures,
    /// The grid page's description of the grid.
    Grid,
    /// The grid page's table of means over seeds.
    GridTable,
    /// The plan page's findings (not numbered).
    PlanFindings,
    /// The plan page's sensitivity of each layer.
    Sensitivity,
    /// The plan page's plan.
    Plan,
    /// The plan page's validation.
    Validation,
    /// The replay page's one section (not numbered).
    Replay,
}

impl Section {
    /// The number (none for an unnumbered section), the anchor and the title.
    const fn parts(self) -> (Option<u8>, &'static str, &'static str) {
        match self {
            Section::Findings => (Some(1), "findings", "Findings"),
            Section::Curves => (Some(2), "curves", "Loss and loss scale"),
            Section::Runs => (Some(3), "runs", "Runs"),
            Section::Information => (Some(4), "information", "Information lost and preserved"),
            Section::Figure3 => (
                Some(5),
                "figure3",
                "Activation gradients against the format (the paper's Figure 3)",
            ),
            Section::Window => (Some(6), "window", "The loss-scale window over training"),
            Section::Swamping => (
                Some(7),
                "swamping",
                "Swamping: updates lost to the master weights' precision",
            ),
            Section::Nonfinite => (Some(8), "nonfinite", "Non-finite events"),
            Section::Recommendation => (Some(1), "findings", "Recommendation"),
            Section::Tensors => (Some(2), "tensors", "Each tensor's own window (worst first)"),
            Section::AnalyzeFigures => (Some(3), "figures", "Figures"),
            Section::GridFindings => (Some(1), "findings", "Findings"),
            Section::GridFigures => (Some(2), "figures", "Figures"),
            Section::Grid => (Some(3), "grid", "The grid"),
            Section::GridTable => (Some(4), "table", "The metric and final loss over seeds"),
            Section::PlanFindings => (None, "findings", "Findings"),
            Section::Sensitivity => (Some(1), "sensitivity", "Each layer cast alone"),
            Section::Plan => (Some(2), "plan", "The plan"),
            Section::Validation => (Some(3), "validation", "Validation"),
            Section::Replay => (None, "replay", "Policies replayed"),
        }
    }

    /// The section's number on its page, for a sentence that points to it ("see section 6");
    /// 0 for an unnumbered one, which no sentence points to.
    #[must_use]
    pub const fn number(self) -> u8 {
        match self.parts().0 {
            Some(n) => n,
            None => 0,
        }
    }

    /// The anchor (`id`) of the section on its page.
    #[must_use]
    pub const fn id(self) -> &'static str {
        self.parts().1
    }

    /// The heading: "6. The loss-scale window over training".
    #[must_use]
    pub fn heading(self) -> String {
        self.titled(self.parts().2)
    }

    /// The heading with a title the page words from its content (the curves that have a metric,
    /// a validation that ran, the grid's metric), numbered as the section is.
    #[must_use]
    pub fn titled(self, title: &str) -> String {
        match self.parts().0 {
            Some(n) => format!("{n}. {title}"),
            None => title.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page numbers its sections 1, 2, 3... in order, each anchor once.
    #[test]
    fn each_page_numbers_its_sections_in_order() {
        use Section::*;
        let pages: [&[Section]; 4] = [
            &[
                Findings,
                Curves,
                Runs,
                Information,
                Figure3,
                Window,
                Swamping,
                Nonfinite,
            ],
            &[Recommendation, Tensors, AnalyzeFigures],
            &[GridFindings, GridFigures, Grid, GridTable],
            &[Sensitivity, Plan, Validation],
        ];
        for page in pages {
            let numbers: Vec<u8> = page.iter().map(|s| s.number()).collect();
            let expected: Vec<u8> = (1..=page.len() as u8).collect();
            assert_eq!(numbers, expected, "{page:?}");
            let mut ids: Vec<&str> = page.iter().map(|s| s.id()).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), page.len(), "{page:?}");
        }
        assert_eq!(Window.heading(), "6. The loss-scale window over training");
        assert_eq!(PlanFindings.heading(), "Findings");
        assert_eq!(
            Validation.titled("Validation by re-training"),
            "3. Validation by re-training"
        );
    }
}
