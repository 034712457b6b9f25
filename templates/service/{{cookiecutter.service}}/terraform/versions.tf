# Terraform for {{ cookiecutter.service }} on Kubernetes: namespace, Envoy config, Deployment (app + Envoy),
# Service, HorizontalPodAutoscaler, PodDisruptionBudget and NetworkPolicy; the prediction topic and bucket.
terraform {
  required_version = ">= 1.5"
  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 2.31"
    }
    kafka = {
      source  = "Mongey/kafka"
      version = "~> 0.7"
    }
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0"
    }
  }
}

provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kube_context
}

# The prediction topic and bucket (prediction_log.tf); credentials come from the environment.
provider "kafka" {
  bootstrap_servers = var.kafka_bootstrap_servers == "" ? ["localhost:9092"] : split(",", var.kafka_bootstrap_servers)
}

provider "aws" {}
