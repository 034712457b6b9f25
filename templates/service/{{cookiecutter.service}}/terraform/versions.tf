# Terraform for {{ cookiecutter.service }} on Kubernetes: namespace, Envoy config, Deployment (app + Envoy),
# Service, HorizontalPodAutoscaler, PodDisruptionBudget and NetworkPolicy.
terraform {
  required_version = ">= 1.5"
  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 2.31"
    }
  }
}

provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kube_context
}
